# mk/task_models.mk — `make task-models` remakes the tiny random-weight
# classifier and sentence-transformers module checkpoints under tests/golden/
# and task_outputs.json (tests/golden/make_task_models.py), and the tiny MPNet
# embedder with its vectors (tests/golden/make_mpnet_model.py). They are
# committed, so `make test` never needs this; torch, transformers and
# sentence-transformers come from PyPI into the bench's virtualenv
# (bench/embed/peers.py installs it on first use).
.PHONY: task-models
task-models:
	python3 bench/embed/peers.py --inputs /dev/null --setup-only
	"$$(python3 -c 'import sys; sys.path.insert(0, "bench/embed"); import peers; print(peers.default_venv())')/bin/python" \
	    tests/golden/make_task_models.py
	"$$(python3 -c 'import sys; sys.path.insert(0, "bench/embed"); import peers; print(peers.default_venv())')/bin/python" \
	    tests/golden/make_mpnet_model.py
