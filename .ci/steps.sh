# steps.sh — sourced by .ci/run: runs CI's steps one by one or side by side,
# times each, and prints one table of every step's wall time when the run ends,
# whether it passed or not (the table is the first thing the next person reads
# when a run fails or nears CI's limit).
#
#   step CMD...               run CMD in the foreground; a failure ends the run
#   together 'CMD' 'CMD' ...  run the commands side by side, each one's output
#                             kept in a file and printed whole when all end, so
#                             logs never interleave; any failure ends the run.
#                             The table lists each command's own time and the
#                             group's wall time, which is what the run paid.

STEPS_TSV=$(mktemp)
STEPS_T0=$SECONDS

steps_record() { # name seconds rc
    local res=ok
    [ "$3" = 0 ] || res="FAILED ($3)"
    printf '%s\t%s\t%s\n' "$1" "$2" "$res" >>"$STEPS_TSV"
}

steps_table() {
    local rc=$?
    # A step that failed while a background build still ran leaves it behind.
    local left
    left=$(jobs -p)
    [ -z "$left" ] || kill $left 2>/dev/null || true
    echo
    echo "==== CI steps: wall seconds on $(nproc) cores," \
        "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
    printf '%-44s %8s  %s\n' step seconds result
    while IFS=$'\t' read -r name secs res; do
        printf '%-44s %8s  %s\n' "$name" "$secs" "$res"
    done <"$STEPS_TSV"
    # Members of a side-by-side group are indented; only the group's line
    # counts towards the total.
    printf '%-44s %8s  %s\n' total $((SECONDS - STEPS_T0)) "$([ $rc = 0 ] && echo passed || echo "failed ($rc)")"
    rm -f "$STEPS_TSV"
    exit $rc
}
trap steps_table EXIT

step() {
    local t0=$SECONDS rc=0
    echo "==== $*"
    "$@" || rc=$?
    steps_record "$*" $((SECONDS - t0)) $rc
    return $rc
}

# Side by side only what does not compete for the same core-bound resource
# heavily enough to stretch a deadline (see .ci/run for each pairing's why).
together() {
    local dir pids=() i=0 rc=0 t0=$SECONDS
    dir=$(mktemp -d)
    for cmd in "$@"; do
        (
            local s=$SECONDS r=0
            bash -c "$cmd" >"$dir/$i.log" 2>&1 </dev/null || r=$?
            printf '%s\t%s\n' $((SECONDS - s)) $r >"$dir/$i.rc"
        ) &
        pids+=($!)
        i=$((i + 1))
    done
    wait "${pids[@]}"
    i=0
    for cmd in "$@"; do
        local secs r
        IFS=$'\t' read -r secs r <"$dir/$i.rc"
        echo "==== $cmd (beside others; ${secs}s)"
        cat "$dir/$i.log"
        steps_record "  $cmd" "$secs" "$r"
        [ "$r" = 0 ] || rc=$r
        i=$((i + 1))
    done
    rm -rf "$dir"
    steps_record "(the $# above side by side)" $((SECONDS - t0)) $rc
    return $rc
}
