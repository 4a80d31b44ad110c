#!/bin/sh
# venv.sh — makes build/e2e-venv: Debian's python3 with its pytest and requests
# (--system-site-packages) plus the PyPI packages of requirements.txt, pinned by
# constraints.txt. Idempotent: reinstalls only when either file changed.
# Prints the venv's python on stdout; fails loudly when PyPI cannot be reached.
set -eu
HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../..")
VENV="$ROOT/build/e2e-venv"
STAMP="$VENV/.requirements"
want=$(cat "$HERE/requirements.txt" "$HERE/constraints.txt" | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
    echo "$VENV/bin/python"
    exit 0
fi
echo "e2e: installing the client libraries into $VENV" >&2
mkdir -p "$ROOT/build"
/usr/bin/python3 -m venv --system-site-packages "$VENV" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$HERE/requirements.txt" -c "$HERE/constraints.txt" >&2
echo "$want" > "$STAMP"
echo "$VENV/bin/python"
