# attnserve — container image.
#
#   docker build -t attnserve .                          # model mounted at run time
#   docker run --rm -p 8080:8080 \
#       -v "$PWD/models/all-MiniLM-L6-v2:/models/all-MiniLM-L6-v2:ro" attnserve
#
#   docker build --build-arg MODEL=bake -t attnserve:minilm .   # model inside the image
#   docker run --rm -p 8080:8080 attnserve:minilm
#
#   docker build --target runtime-cuda --build-arg MODEL=bake -t attnserve:minilm-cuda .
#   docker run --rm --gpus all -p 8080:8080 attnserve:minilm-cuda      # the GPU image
#
# MODEL=bake copies models/all-MiniLM-L6-v2 from the build context (fetch it
# first with `make model`). Without it the image expects the model directory
# mounted at /models/all-MiniLM-L6-v2 (ATTNSERVE_MODEL points there; set it to
# another path to serve another BERT-family model).
#
# Configuration: every setting is an ATTNSERVE_<NAME> environment variable
# (see `docker run --rm attnserve --help`), which overrides the config file
# /etc/attnserve/attnserve.json (the repository's config/attnserve.json; mount
# your own over it, as deploy/k8s does with a ConfigMap).
#
# `docker stop` sends SIGTERM straight to attnserve (PID 1, exec-form
# ENTRYPOINT): /ready turns 503, accepted requests are answered, exit 0 within
# drain_timeout_s (default 20 s). Give `docker stop -t` more than that.

ARG DEBIAN_IMAGE=debian:bookworm-slim
# The GPU image's bases (target runtime-cuda, below).
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

# ---- build: the toolchain and -dev packages, from the project's own list ----
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
# install-deps.sh also fetches Swagger UI for /docs (get-swagger-ui.sh).
COPY scripts/install-deps.sh scripts/get-swagger-ui.sh scripts/
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Only the service binary (the default target also builds benchmarks). The
# build is portable: SIMD paths are chosen at run time by CPUID.
# The runtime stage installs exactly the packages that own the libraries the
# binary links (deploy/docker/runtime-packages.sh), and checks that each one
# resolves to the same path there as here.
RUN make -j"$(nproc)" build/attnserve \
    && install -D -m 0755 build/attnserve /out/usr/local/bin/attnserve \
    && mkdir -p /out/usr/share/attnserve \
    && deploy/docker/runtime-packages.sh build/attnserve > /out/usr/share/attnserve/runtime-packages \
    && ldd build/attnserve | awk '$2 == "=>" { print $1, $3 }' | sort > /out/usr/share/attnserve/libraries \
    && install -D -m 0755 deploy/docker/healthcheck.sh /out/usr/local/bin/attnserve-healthcheck \
    && install -D -m 0644 THIRD_PARTY_NOTICES /out/usr/share/doc/attnserve/THIRD_PARTY_NOTICES \
    && mkdir -p /out/etc/attnserve /out/models \
    && if [ -f config/attnserve.json ]; then \
           cp config/attnserve.json /out/etc/attnserve/attnserve.json; \
       else \
           echo '{}' > /out/etc/attnserve/attnserve.json; \
       fi
# Declared here, after the compile, so that changing it reuses the layers above.
ARG MODEL=mount
RUN case "$MODEL" in \
    mount) ;; \
    bake) test -s models/all-MiniLM-L6-v2/model.safetensors \
              || { echo "MODEL=bake: models/all-MiniLM-L6-v2 is missing; run make model first" >&2; exit 1; }; \
          cp -a models/all-MiniLM-L6-v2 /out/models/ \
          && rm -rf /out/models/all-MiniLM-L6-v2/.cache /out/models/all-MiniLM-L6-v2/*.partial.* ;; \
    *) echo "MODEL must be mount or bake, not '$MODEL'" >&2; exit 1 ;; \
    esac

# ---- GPU image (--target runtime-cuda): the same service and the cuda engine ---
# Built and run on NVIDIA's CUDA images rather than Debian: their runtime image
# carries libcudart and libcublasLt, which the plugin links (rpath
# /usr/local/cuda/lib64), and the driver comes from the host through the
# NVIDIA container toolkit. Both stages are the same Ubuntu, so the runtime
# packages are read from the binary exactly as for the Debian image. The
# plugin is installed in plugin_dir; engine stays `auto`, which takes cuda
# where a GPU is visible and the CPU engine where none is (set
# ATTNSERVE_ENGINE=cuda to refuse to start without one, as deploy/k8s/gpu does).
FROM ${CUDA_DEVEL_IMAGE} AS build-cuda
WORKDIR /src
# The build's packages only (install-deps.sh also installs Debian-only test
# tools).
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
         build-essential pkg-config libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev \
         python3-pip ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY . .
# Swagger UI for /docs, built into the binary (pip only downloads its wheel).
RUN scripts/get-swagger-ui.sh \
    && make -j"$(nproc)" build/attnserve cuda CUDA_HOME=/usr/local/cuda \
    && install -D -m 0755 build/attnserve /out/usr/local/bin/attnserve \
    && install -D -m 0644 build/gpu-engines/cuda.so /out/usr/lib/attnserve/engines/cuda.so \
    && mkdir -p /out/usr/share/attnserve \
    && deploy/docker/runtime-packages.sh build/attnserve > /out/usr/share/attnserve/runtime-packages \
    && ldd build/attnserve | awk '$2 == "=>" { print $1, $3 }' | sort > /out/usr/share/attnserve/libraries \
    && install -D -m 0755 deploy/docker/healthcheck.sh /out/usr/local/bin/attnserve-healthcheck \
    && install -D -m 0644 THIRD_PARTY_NOTICES /out/usr/share/doc/attnserve/THIRD_PARTY_NOTICES \
    && mkdir -p /out/etc/attnserve /out/models \
    && if [ -f config/attnserve.json ]; then \
           cp config/attnserve.json /out/etc/attnserve/attnserve.json; \
       else \
           echo '{}' > /out/etc/attnserve/attnserve.json; \
       fi
ARG MODEL=mount
RUN case "$MODEL" in \
    mount) ;; \
    bake) test -s models/all-MiniLM-L6-v2/model.safetensors \
              || { echo "MODEL=bake: models/all-MiniLM-L6-v2 is missing; run make model first" >&2; exit 1; }; \
          cp -a models/all-MiniLM-L6-v2 /out/models/ \
          && rm -rf /out/models/all-MiniLM-L6-v2/.cache /out/models/all-MiniLM-L6-v2/*.partial.* ;; \
    *) echo "MODEL must be mount or bake, not '$MODEL'" >&2; exit 1 ;; \
    esac

FROM ${CUDA_RUNTIME_IMAGE} AS runtime-cuda
COPY --from=build-cuda /out/usr/share/attnserve/runtime-packages /usr/share/attnserve/runtime-packages
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
         $(cat /usr/share/attnserve/runtime-packages) \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && useradd --system --uid 10001 --user-group --no-create-home \
         --home-dir /nonexistent --shell /usr/sbin/nologin attnserve
COPY --from=build-cuda /out/ /
# The core's libraries as in the build stage, and the plugin's CUDA libraries
# resolved (the driver, libcuda, is the host's and absent at build time).
RUN ldd /usr/local/bin/attnserve | awk '$2 == "=>" { print $1, $3 }' | sort > /tmp/libraries \
    && diff -u /usr/share/attnserve/libraries /tmp/libraries \
    && rm /tmp/libraries \
    && ! ldd /usr/lib/attnserve/engines/cuda.so | grep 'not found' \
    && /usr/local/bin/attnserve --version
ENV ATTNSERVE_HOST=0.0.0.0 \
    ATTNSERVE_MODEL=/models/all-MiniLM-L6-v2 \
    ATTNSERVE_PLUGIN_DIR=/usr/lib/attnserve/engines
USER 10001:10001
WORKDIR /
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/attnserve-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/attnserve"]
CMD ["--config", "/etc/attnserve/attnserve.json"]

# ---- runtime: only the shared libraries the binary links ---------------------
# Today libmicrohttpd12, libjansson4, libuv1, libpcre2-8-0, libc6 and the pthread OpenBLAS
# (libopenblas0-pthread) that the Makefile pins with a RUNPATH.
FROM ${DEBIAN_IMAGE} AS runtime
COPY --from=build /out/usr/share/attnserve/runtime-packages /usr/share/attnserve/runtime-packages
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
         $(cat /usr/share/attnserve/runtime-packages) \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && useradd --system --uid 10001 --user-group --no-create-home \
         --home-dir /nonexistent --shell /usr/sbin/nologin attnserve
COPY --from=build /out/ /
# Fail the build, not the first start, if a library is missing or resolves
# elsewhere than in the build stage (e.g. another BLAS variant).
RUN ldd /usr/local/bin/attnserve | awk '$2 == "=>" { print $1, $3 }' | sort > /tmp/libraries \
    && diff -u /usr/share/attnserve/libraries /tmp/libraries \
    && rm /tmp/libraries \
    && /usr/local/bin/attnserve --version

ENV ATTNSERVE_HOST=0.0.0.0 \
    ATTNSERVE_MODEL=/models/all-MiniLM-L6-v2
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/attnserve-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/attnserve"]
CMD ["--config", "/etc/attnserve/attnserve.json"]
