#!/bin/sh
# get-swagger-ui.sh [DIR] — puts Swagger UI's browser files (swagger-ui-bundle.js,
# swagger-ui.css, favicon-32x32.png, its LICENSE and VERSION) under DIR, default the folder that
# `get-swagger-ui.sh --dir` prints; the build takes them into the binary, where
# GET /docs serves them (server/http/openapi.c). scripts/install-deps.sh runs it.
# --check [DIR]: exit 0 when DIR holds them, 1 when not (nothing fetched).
#
# Source: the PyPI wheel flask-swagger-ui, pinned by version and SHA-256. It
# carries swagger-ui's own dist/ folder unchanged and follows upstream's
# releases within a week; Debian's only copy (python3-flasgger) is Swagger UI
# 3.x, which cannot read an OpenAPI 3.1 document, and the PyPI swagger-ui-bundle
# stops at 4.15.5. Only the wheel's files are read: nothing is installed and
# Flask is never needed. When DIR already holds this version it only checks.
set -eu

VERSION=5.34.0
WHEEL=flask_swagger_ui-$VERSION-py3-none-any.whl
WHEEL_SHA256=63e4ecfee6345ca746c11c5341c6f2a1cbe271e518aac1659889cd3905b1110f
FILES="swagger-ui-bundle.js swagger-ui.css favicon-32x32.png LICENSE VERSION"

case "${1:-}" in
--dir)
    echo "/usr/local/share/attnserve/swagger-ui-$VERSION"
    exit 0
    ;;
esac
CHECK=
if [ "${1:-}" = --check ]; then
    CHECK=1
    shift
fi
DIR=${1:-/usr/local/share/attnserve/swagger-ui-$VERSION}

die() { echo "get-swagger-ui: $*" >&2; exit 1; }

complete() {
    [ "$(cat "$DIR/VERSION" 2>/dev/null)" = "v$VERSION" ] || return 1
    for f in $FILES; do [ -s "$DIR/$f" ] || return 1; done
}
complete && exit 0
[ -z "$CHECK" ] || exit 1

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
echo "get-swagger-ui: downloading Swagger UI $VERSION ($WHEEL) from PyPI" >&2
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$TMP" "flask-swagger-ui==$VERSION" ||
    die "download of flask-swagger-ui $VERSION from PyPI failed"
[ "$(sha256sum "$TMP/$WHEEL" | cut -d' ' -f1)" = "$WHEEL_SHA256" ] ||
    die "$WHEEL: SHA-256 differs from the pinned one"
mkdir -p "$TMP/out"
python3 - "$TMP/$WHEEL" "$TMP/out" $FILES <<'PYEOF' || die "cannot unpack $WHEEL"
import os, sys, zipfile
wheel, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with open(os.path.join(dest, name), "wb") as out:
            out.write(z.read("flask_swagger_ui/dist/" + name))
PYEOF
for f in $FILES; do [ -s "$TMP/out/$f" ] || die "$f missing from $WHEEL"; done
[ "$(cat "$TMP/out/VERSION")" = "v$VERSION" ] || die "$WHEEL carries another version"

# Swapped in whole, so an interrupted run never leaves a half-written folder
# that a later run would take for complete.
mkdir -p "$(dirname "$DIR")"
rm -rf "$DIR"
cp -R "$TMP/out" "$DIR.partial.$$"
chmod -R a+rX "$DIR.partial.$$"
mv "$DIR.partial.$$" "$DIR"
echo "get-swagger-ui: Swagger UI $VERSION ready in $DIR" >&2
