# attnserve — container image.
#
#   docker build -t attnserve .                          # model mounted at run time
#   docker run --rm -p 8080:8080 \
#       -v "$PWD/models/all-MiniLM-L6-v2:/models/all-MiniLM-L6-v2:ro" attnserve
#
#   docker build --build-arg MODEL=bake -t attnserve:minilm .   # model inside the image
#   docker run --rm -p 8080:8080 attnserve:minilm
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

# ---- build: the toolchain and -dev packages, from the project's own list ----
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
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
