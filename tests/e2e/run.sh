#!/bin/sh
# run.sh BIN — end-to-end tests: pytest starts the real binary BIN on free
# loopback ports and talks HTTP to it. Debian's python3 is used on purpose
# (python3-pytest and python3-requests come from scripts/install-deps.sh), so
# a pyenv or virtualenv on PATH cannot change what runs; the client libraries
# the tests call the service with (requirements.txt) come from PyPI into a
# venv of that python (venv.sh). pytest's exit status is this script's.
# Extra arguments go to pytest (-k NAME, -x, test files, ...).
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 BIN [pytest args]" >&2
    exit 2
fi
BIN=$(realpath "$1")
shift
HERE=$(dirname "$(realpath "$0")")
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest, requests' 2>/dev/null; then
    echo "e2e: $PY lacks pytest or requests; run scripts/install-deps.sh" >&2
    exit 2
fi
PY=$("$HERE/venv.sh")
cd "$HERE"
# -rs: every skipped test's reason (each says NOT RUN and why) is in the
# summary, so a check that could not run here shows in the output.
# Test files named in the arguments (test_x.py, test_x.py::name) are run
# instead of the whole folder.
ALL=$HERE
for a in "$@"; do
    case $a in
    -*) ;;
    *.py | *.py::*) ALL= ;;
    esac
done
ATTNSERVE_BIN="$BIN" exec "$PY" -m pytest -q -rs -p no:cacheprovider "$@" ${ALL:+"$ALL"}
