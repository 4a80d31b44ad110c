# mk/chunk.mk — benchmarks of server-side chunking (server/api/embed_chunk.h).
#
#   make bench-chunk   server-side chunking against LangChain's splitters plus
#                      plain requests: throughput and words split
#                      (bench/chunk/splitters.py; BENCH_CHUNK_ARGS, e.g.
#                      "--docs 100 --rounds 3"), then the /health stall while a
#                      1 MB document is tokenized (bench/chunk/io_stall.py).
# OpenBLAS's forced kernels are unset for the benchmark's server only.
.PHONY: bench-chunk
BENCH_CHUNK_ARGS ?=
bench-chunk: $(BIN) model
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/chunk/splitters.py $(BIN) $(BENCH_CHUNK_ARGS)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/chunk/io_stall.py $(BIN)
