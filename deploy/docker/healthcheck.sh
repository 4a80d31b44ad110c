#!/bin/bash
# attnserve-healthcheck — the image's HEALTHCHECK: GET /health on the port the
# service listens on, with nothing but bash (its /dev/tcp) and coreutils, so
# the runtime image needs no curl. Exit 0 when the answer is 200, else 1.
#
# Port and address follow the same environment the service reads
# (ATTNSERVE_PORT, ATTNSERVE_HOST; defaults 8080 and every address). If the
# port is set only in a config file, set ATTNSERVE_PORT too.
port=${ATTNSERVE_PORT:-8080}
host=${ATTNSERVE_HOST:-127.0.0.1}
case "$host" in
0.0.0.0 | "" | "*") host=127.0.0.1 ;;
:: | "[::]") host=::1 ;;
\[*\]) host=${host#[}; host=${host%]} ;;
esac
exec timeout 4 bash -c '
exec 3<>"/dev/tcp/$0/$1" || exit 1
printf "GET /health HTTP/1.0\r\nHost: localhost\r\nUser-Agent: attnserve-healthcheck\r\n\r\n" >&3
IFS=" " read -r proto status rest <&3 || exit 1
[ "$status" = 200 ]' "$host" "$port"
