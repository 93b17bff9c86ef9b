#!/usr/bin/env bash
# corpus.sh - record generated jobs and measure their twins (issue 58; docs/accuracy.md)
#
# usage: corpus.sh GPUTRACE OUT_DIR SEED...
#
# For each seed, one process (corpus.py run SEED): the planted job warms up, gputrace records
# it for CORPUS_TRACE_SECONDS [3] (OUT/SEED.gtr, the live report in OUT/SEED.live.json), then
# the same process measures, untraced, the planted job, each twin and the all-fixed twin
# (OUT/SEED.json). A job with CPU contention gets CORPUS_HOGS [3] busy processes pinned to
# CORPUS_CORE [2], which corpus.py stops and continues per twin. One line per seed in
# OUT/corpus.txt; a seed that fails is logged and the next one runs.
#
# CORPUS_RECORD_FIXED=1 records the all-fixed twin too (OUT/SEED.fixed.gtr): a real pair
# for `gputrace diff OUT/SEED.gtr OUT/SEED.fixed.gtr`.
#
# Environment: PYTHON [python3], CORPUS_SECONDS [2.5] (each untraced measurement),
# CORPUS_TRACE_SECONDS [3], CORPUS_CORE [2], CORPUS_HOGS [3], CORPUS_UNTIL [none] (a time,
# seconds since the epoch, after which no seed starts: a device call's limit). The first
# seed failing stops the run (the rest would fail the same way).
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 GPUTRACE OUT_DIR SEED..." >&2
    exit 2
fi
GPUTRACE=$1
OUT=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
SECONDS_EACH=${CORPUS_SECONDS:-2.5}
TRACE_S=${CORPUS_TRACE_SECONDS:-3}
CORE=${CORPUS_CORE:-2}
N_HOGS=${CORPUS_HOGS:-3}
mkdir -p "$OUT" || exit 1

say() { echo "$1: $2" | tee -a "$OUT/corpus.txt"; }

# What runs now, for the cleanup: the busy processes (maybe stopped) and the job.
HOGS=()
JOB=""
cleanup() {
    for h in "${HOGS[@]}"; do kill -CONT "$h" 2>/dev/null; kill "$h" 2>/dev/null; done
    [ -n "$JOB" ] && kill "$JOB" 2>/dev/null
    HOGS=()
    JOB=""
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

one_seed() {
    local seed=$1 pid from_job to_job line gp started
    started=$(date +%s)
    if "$PYTHON" "$HERE/corpus.py" draw "$seed" | grep -q '"contention"'; then
        for _ in $(seq "$N_HOGS"); do taskset -c "$CORE" sh -c 'while :; do :; done' & HOGS+=($!); done
    fi
    rm -f "$OUT/$seed.gtr" "$OUT/$seed.fixed.gtr" "$OUT/$seed.json"
    # exec: the coprocess is python itself (its pid is the one traced and waited for).
    coproc JOBP { CORPUS_HOGS="${HOGS[*]}" CORPUS_CORE=$CORE PYTHONUNBUFFERED=1 exec "$PYTHON" "$HERE/corpus.py" run "$seed" --out "$OUT" --seconds "$SECONDS_EACH" --traced-seconds "$(awk "BEGIN { print $TRACE_S + 1 }")" 2>"$OUT/$seed.py.err"; }
    pid=$JOBP_PID
    JOB=$pid
    exec {from_job}<&"${JOBP[0]}" {to_job}>&"${JOBP[1]}"
    if ! read -r -t 240 -u "$from_job" line || [ "$line" != ready ]; then
        say "$seed" "failed: not ready (${line:-nothing}); see $seed.py.err"
    else
        "$GPUTRACE" -v record --pid "$pid" -o "$OUT/$seed.gtr" --duration "$TRACE_S" --json >"$OUT/$seed.live.json" 2>"$OUT/$seed.err" &
        gp=$!
        for _ in $(seq 1 400); do grep -q "armed: tracing" "$OUT/$seed.err" && break; sleep 0.05; done
        echo go >&"$to_job"
        wait "$gp"
        local rc=$?
        read -r -t 60 -u "$from_job" line
        echo twins >&"$to_job"
        read -r -t 400 -u "$from_job" line
        if [ "$line" = fixed-ready ]; then
            # CORPUS_RECORD_FIXED=1: the all-fixed twin recorded as the planted job was.
            "$GPUTRACE" -v record --pid "$pid" -o "$OUT/$seed.fixed.gtr" --duration "$TRACE_S" >/dev/null 2>"$OUT/$seed.fixed.err" &
            gp=$!
            for _ in $(seq 1 400); do grep -q "armed: tracing" "$OUT/$seed.fixed.err" && break; sleep 0.05; done
            echo go >&"$to_job"
            wait "$gp"
            read -r -t 60 -u "$from_job" line
            read -r -t 60 -u "$from_job" line
        fi
        if [ "$line" = done ]; then
            local failed
            failed=$(grep -c ": failed:" "$OUT/$seed.py.err")
            say "$seed" "done, record rc $rc, $failed twin(s) failed, $(( $(date +%s) - started )) s, $(stat -c %s "$OUT/$seed.gtr" 2>/dev/null) bytes"
        else
            say "$seed" "failed: no twins (${line:-nothing}); see $seed.py.err"
        fi
    fi
    exec {from_job}<&- {to_job}>&-
    cleanup
    wait 2>/dev/null
}

first=1
for seed in "$@"; do
    if [ -n "${CORPUS_UNTIL:-}" ] && [ "$(date +%s)" -ge "$CORPUS_UNTIL" ]; then
        say "$seed" "skipped: past CORPUS_UNTIL"
        continue
    fi
    one_seed "$seed"
    if [ "$first" = 1 ] && ! [ -s "$OUT/$seed.json" ]; then
        echo "corpus.sh: the first seed failed; stopping" >&2
        exit 1
    fi
    first=0
done
