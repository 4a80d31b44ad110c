# mk/task_models.mk — `make task-models` remakes the tiny random-weight
# classifier and sentence-transformers module checkpoints under tests/golden/
# and task_outputs.json (tests/golden/make_task_models.py), the tiny MPNet
# embedder with its vectors (tests/golden/make_mpnet_model.py), and the tiny
# ModernBERT (embedder and cross-encoder), Qwen3-Embedding, EmbeddingGemma and
# NomicBERT checkpoints with their float64 vectors and logits
# (tests/golden/make_modernbert_model.py, make_modernbert_reranker.py,
# make_qwen3_model.py, make_gemma3_model.py, make_nomic_bert_model.py); all
# but make_task_models.py share tests/golden/family_models.py, as
# make_xlmr_model.py and make_roberta_model.py do. They are committed, so
# `make test` never needs this; torch, transformers and sentence-transformers
# come from PyPI into the bench's virtualenv (bench/embed/peers.py installs it
# on first use).
TASK_MODEL_SCRIPTS := make_task_models.py make_mpnet_model.py make_modernbert_model.py \
                      make_modernbert_reranker.py make_qwen3_model.py make_gemma3_model.py \
                      make_nomic_bert_model.py

.PHONY: task-models
task-models:
	python3 bench/embed/peers.py --inputs /dev/null --setup-only
	py="$$(python3 -c 'import sys; sys.path.insert(0, "bench/embed"); import peers; print(peers.default_venv())')/bin/python" && \
	for s in $(TASK_MODEL_SCRIPTS); do "$$py" tests/golden/$$s || exit 1; done
