#!/bin/sh
# runtime-packages.sh BINARY — the Debian packages that hold the shared
# libraries BINARY loads, one per line: what the image's runtime stage must
# install, read from the binary itself rather than from a second list that
# could drift from the Makefile (the BLAS variant, for one, is the Makefile's
# choice: serial OpenBLAS through a RUNPATH, the pthread one, or none).
#
# Each library is looked up with dpkg -S under the path the loader resolved,
# then under its real path (alternatives symlinks such as libopenblas.so.0
# belong to no package). A library no package owns is an error.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }

# The libraries BINARY names itself (DT_NEEDED); apt brings their own
# dependencies. ldd says where each one resolves, RUNPATH included.
needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
libs=$(for n in $needed; do
    ldd "$1" | awk -v n="$n" '$1 == n && $2 == "=>" && $3 ~ /^\// { print $3 }'
done)
[ -n "$libs" ] || { echo "runtime-packages: found no shared libraries in $1" >&2; exit 1; }
for lib in $libs; do
    pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null) || {
        echo "runtime-packages: no Debian package owns $lib" >&2
        exit 1
    }
    # "libfoo1:amd64: /path" (possibly "a, b: /path" for shared paths): the first name.
    echo "$pkg" | head -n 1 | cut -d: -f1 | cut -d, -f1
done | sort -u
