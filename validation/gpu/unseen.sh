#!/usr/bin/env bash
# unseen.sh - run the blind test set (unseen.py) under gputrace, one mode at a time.
#
# usage: unseen.sh GPUTRACE OUT_DIR [MODE...]
#
#   GPUTRACE  path of the gputrace binary
#   OUT_DIR   where results go (created):
#               OUT/MODE.json    gputrace's JSON report
#               OUT/MODE.err     gputrace's stderr (-v)
#               OUT/MODE.py.err  the job's stderr
#               OUT/unseen.txt   one line per mode run, appended: "MODE: done N"
#                                (or "MODE: failed WHY"); the last line of a mode wins
#   MODE...   default: every planted mode, its _fixed twin, and the healthy modes
#
# For each mode: start `python3 unseen.py MODE --seconds 7` as a coprocess,
# wait for its "ready", attach gputrace for 6 s, wait until gputrace says
# "armed: tracing", release the job (one line on its stdin), wait for gputrace,
# read the job's "done N", wait for the job.  A mode that fails is logged and
# skipped; the others still run.
#
# Environment (defaults in brackets): UNSEEN_JOB [unseen.py] (another job script with the
# same protocol, e.g. competing.py), PYTHON [python3], UNSEEN_SECONDS [7]
# (timed loop), UNSEEN_TRACE_SECONDS [6] (gputrace --duration),
# UNSEEN_READY_TIMEOUT [180] (seconds to wait for "ready"), UNSEEN_RECORD [""] (modes, space
# separated, traced with `record` instead of `attach`: OUT/MODE.gtr then holds the session,
# and `gputrace report OUT/MODE.gtr --json` gives the same report offline; "all" records
# every mode). A recording keeps every launch: skip the launch-heavy jobs, whose files run
# to hundreds of MB.

set -u

if [ $# -lt 2 ]; then
    echo "usage: $0 GPUTRACE OUT_DIR [MODE...]" >&2
    exit 2
fi
GPUTRACE=$1
OUT=$2
shift 2

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
JOB_PY=${UNSEEN_JOB:-$HERE/unseen.py}
PYTHON=${PYTHON:-python3}
JOB_SECONDS=${UNSEEN_SECONDS:-7}
TRACE_SECONDS=${UNSEEN_TRACE_SECONDS:-6}
READY_TIMEOUT=${UNSEEN_READY_TIMEOUT:-180}
case $JOB_SECONDS in
    ''|*[!0-9.]*) echo "unseen.sh: UNSEEN_SECONDS must be a number" >&2; exit 2 ;;
esac
JOB_WHOLE=${JOB_SECONDS%%.*}
DONE_TIMEOUT=$(( ${JOB_WHOLE:-0} + 120 ))   # seconds to wait for "done N" after gputrace

PLANTED="metrics_sync nan_guard tokenize_inline numpy_augment pageable_inputs tiny_batch
         timer_sync cache_flush mixed_loader_item"
HEALTHY="healthy_big healthy_loader"

if [ $# -gt 0 ]; then
    MODES=("$@")
else
    MODES=()
    for m in $PLANTED; do MODES+=("$m" "${m}_fixed"); done
    for m in $HEALTHY; do MODES+=("$m"); done
fi

mkdir -p "$OUT" || exit 1
RESULTS=$OUT/unseen.txt

say() { echo "unseen.sh: $*" >&2; }

# record MODE TEXT: append "MODE: TEXT" to the results file
record() { echo "$1: $2" >> "$RESULTS"; }

# run_mode MODE: one traced run; returns non-zero (after logging) on failure
run_mode() {
    local mode=$1
    local pid from_job to_job line tracer trace_rc job_rc i done_line=""

    rm -f "$OUT/$mode.json" "$OUT/$mode.err"
    # A fixed twin that loads in workers takes as many as its planted job's report simulated
    # the fix with (saving.workers), where that report ran first and says.
    local workers=""
    if [[ $mode == *_fixed ]] && [ -z "${TWIN_WORKERS:-}" ]; then
        workers=$("$PYTHON" -c "import json,sys
r=json.load(open(sys.argv[1]))
print(next((d['saving']['workers'] for d in r['diagnoses'] if (d.get('saving') or {}).get('workers')), ''))" "$OUT/${mode%_fixed}.json" 2>/dev/null)
        [ -n "$workers" ] && say "$mode: $workers workers (the planted job's report)"
    fi
    coproc JOB { TWIN_WORKERS=${TWIN_WORKERS:-$workers}  PYTHONUNBUFFERED=1 exec "$PYTHON" "$JOB_PY" "$mode" --seconds "$JOB_SECONDS" 2>"$OUT/$mode.py.err"; }
    pid=${JOB_PID:-}
    # Keep our own copies of the pipe ends: bash unsets JOB[] (and closes its
    # fds) when the coprocess exits, which may happen before we are done.
    local job_out=${JOB[0]:-} job_in=${JOB[1]:-}
    if [ -z "$pid" ] || [ -z "$job_out" ] || [ -z "$job_in" ] ||
        ! exec {from_job}<&"$job_out" {to_job}>&"$job_in"; then
        say "$mode: coprocess did not start; see $OUT/$mode.py.err"
        [ -n "$pid" ] && wait "$pid" 2>/dev/null
        record "$mode" "failed (did not start)"
        return 1
    fi

    if ! read -r -t "$READY_TIMEOUT" line <&"$from_job" || [ "$line" != "ready" ]; then
        say "$mode: no 'ready' (got '${line:-}'); see $OUT/$mode.py.err"
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        exec {from_job}<&- {to_job}>&-
        record "$mode" "failed (no ready)"
        return 1
    fi

    # gputrace must not inherit the job's pipes
    local how=(attach)
    if [ "${UNSEEN_RECORD:-}" = all ] || [[ " ${UNSEEN_RECORD:-} " == *" $mode "* ]]; then
        rm -f "$OUT/$mode.gtr"
        how=(record -o "$OUT/$mode.gtr")
    fi
    "$GPUTRACE" -v "${how[@]}" --pid "$pid" --duration "$TRACE_SECONDS" --json \
        > "$OUT/$mode.json" 2> "$OUT/$mode.err" \
        {from_job}<&- {to_job}>&- {job_out}<&- {job_in}>&- &
    tracer=$!

    # wait (50 ms polls, 15 s at most) until gputrace has armed its probes
    i=0
    until grep -q "armed: tracing" "$OUT/$mode.err" 2>/dev/null; do
        if ! kill -0 "$tracer" 2>/dev/null; then
            say "$mode: gputrace exited before arming; see $OUT/$mode.err"
            break
        fi
        if [ "$i" -ge 300 ]; then
            say "$mode: gputrace not armed after 15 s; releasing the job anyway"
            break
        fi
        sleep 0.05
        i=$((i + 1))
    done

    echo go >&"$to_job"
    wait "$tracer"
    trace_rc=$?
    [ "$trace_rc" -ne 0 ] && say "$mode: gputrace exited with $trace_rc"

    if read -r -t "$DONE_TIMEOUT" line <&"$from_job" && [[ "$line" == done\ * ]]; then
        done_line=$line
    else
        say "$mode: no 'done N' from the job (got '${line:-}'); see $OUT/$mode.py.err"
        kill "$pid" 2>/dev/null
    fi
    exec {to_job}>&-
    wait "$pid"
    job_rc=$?
    exec {from_job}<&-

    if [ -z "$done_line" ]; then
        record "$mode" "failed (no done line, exit $job_rc)"
        return 1
    fi
    [ "$job_rc" -ne 0 ] && say "$mode: job exited with $job_rc after '$done_line'"
    record "$mode" "$done_line"
    say "$mode: $done_line (gputrace rc $trace_rc)"
    return 0
}

failed=0
for mode in "${MODES[@]}"; do
    say "=== $mode"
    run_mode "$mode" || failed=$((failed + 1))
done
say "finished ${#MODES[@]} modes, $failed failed; results in $RESULTS"
exit 0
