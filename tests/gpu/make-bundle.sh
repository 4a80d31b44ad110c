#!/usr/bin/env bash
# tests/gpu/make-bundle.sh OUT BUILD MODEL_DIR — everything tests/gpu/run.sh
# needs on a GPU machine that builds nothing (make gpu-bundle): the GPU
# machine is offline, has none of the project's Debian packages, and receives
# the tree and this archive within 64 MiB.
#
# The archive holds, under one root:
#   BUILD/attnserve, BUILD/unit-tests, BUILD/gpu-attn, BUILD/gpu-engine and
#       BUILD/gpu-engines/cuda.so, debug info stripped (strip -g: symbols stay
#       for backtraces), at the paths the unit tests were compiled to look at;
#   lib/    every shared library they load that the GPU machine may lack:
#           all of ldd's list but glibc, the GCC runtime (libstdc++, libgcc_s)
#           and CUDA's own (that machine has CUDA 13 in /usr/local/cuda);
#   models/<name>-fp16/  MODEL_DIR with its F32 tensors stored as F16
#           (scripts/model_to_fp16.py), the only copy of the model that fits;
#   models/task/  the tiny task models reshaped to heads of 32
#           (tests/gpu/task_models.py), which gpu-engine checks against the
#           CPU engine (about 2 MB unpacked);
#   BUNDLE  what was built, from which commit, and BUILD's name.
# Checked before the archive is written: no binary carries DT_RPATH (which
# LD_LIBRARY_PATH cannot override; the binaries' RUNPATH to Debian's
# OpenBLAS it can), and every library resolves, with only lib/ and
# CUDA_HOME/lib64 on LD_LIBRARY_PATH, to one of those two or to the
# system's glibc and GCC runtime. Prints the archive's size and fails above
# MAX_MB (default 55).
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: $0 OUT BUILD MODEL_DIR" >&2
    exit 2
fi
OUT=$1 BUILD=$2 MODEL=$3
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
MAX_MB=${MAX_MB:-55}
die() { echo "make-bundle: $*" >&2; exit 1; }
case $BUILD in
/*) die "BUILD must be relative (the unit tests look for BUILD/gpu-engines/cuda.so from the tree's root)" ;;
esac

BINS="attnserve unit-tests gpu-attn gpu-engine gpu-engines/cuda.so"
STAGE="$BUILD/gpu-bundle"
rm -rf "$STAGE"
mkdir -p "$STAGE/$BUILD/gpu-engines" "$STAGE/lib" "$STAGE/models"
for f in $BINS; do
    [ -f "$BUILD/$f" ] || die "$BUILD/$f is missing"
    strip -g -o "$STAGE/$BUILD/$f" "$BUILD/$f"
    if readelf -d "$STAGE/$BUILD/$f" | grep -q '(RPATH)'; then
        die "$BUILD/$f has DT_RPATH, which LD_LIBRARY_PATH cannot override; link with --enable-new-dtags"
    fi
done

# What the GPU machine has: glibc, the GCC runtime, CUDA (and the driver).
provided() {
    case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libstdc++.so.* | libgcc_s.so.* | \
        libcuda.so.* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnvrtc*.so.* | \
        libnvJitLink*.so.*)
        return 0 ;;
    esac
    return 1
}

for f in $BINS; do
    ldd "$BUILD/$f" >"$STAGE/ldd.txt" || die "ldd $BUILD/$f failed"
    if grep -q 'not found' "$STAGE/ldd.txt"; then
        die "$BUILD/$f: $(grep 'not found' "$STAGE/ldd.txt" | tr -s ' \t' ' ')"
    fi
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$STAGE/ldd.txt" |
        while read -r soname path; do
            provided "$soname" || cp -L "$path" "$STAGE/lib/$soname"
        done
done
rm -f "$STAGE/ldd.txt"

# Resolved with only the bundle and CUDA: anything else from the system
# would be missing there.
for f in $BINS; do
    env -i LD_LIBRARY_PATH="$STAGE/lib:$CUDA_HOME/lib64" ldd "$STAGE/$BUILD/$f" |
        awk '$2 == "=>" { print $1, $3 }' | while read -r soname path; do
        case $path in
        "$STAGE/lib/"* | "$CUDA_HOME/lib64/"* | "$(realpath "$CUDA_HOME")/"*) ;;
        *) provided "$soname" || die "$f: $soname resolves to $path, outside the bundle" ;;
        esac
    done
done

MODEL_NAME=$(basename "$MODEL")-fp16
python3 scripts/model_to_fp16.py "$MODEL" "$STAGE/models/$MODEL_NAME"
python3 tests/gpu/task_models.py "$STAGE/models/task" >/dev/null

{
    echo "build=$BUILD"
    echo "model=models/$MODEL_NAME"
    echo "tasks=models/task"
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "binaries=$BINS"
    echo "libraries=$(cd "$STAGE/lib" && ls | tr '\n' ' ')"
} >"$STAGE/BUNDLE"

tar -C "$STAGE" -cf - . | xz -9 -T2 >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
BYTES=$(stat -c %s "$OUT")
echo "make-bundle: $OUT: $(awk -v b="$BYTES" 'BEGIN { printf "%.1f MB (%.1f MiB)", b / 1e6, b / 1048576 }')," \
    "$(du -sm "$STAGE" | cut -f1) MiB unpacked, libraries: $(ls "$STAGE/lib" | wc -l)"
[ "$BYTES" -le $((MAX_MB * 1000000)) ] || die "$OUT is over MAX_MB=$MAX_MB MB"
