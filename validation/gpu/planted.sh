#!/usr/bin/env bash
# For each planted job: start it, attach gputrace once it is warm, trace 6 s, keep the report.
# Usage: planted.sh GPUTRACE OUT_DIR [MODE...]
# Environment: PLANTED_RECORD [""]: modes (space separated, or "all") traced with `record`
# into OUT/MODE.gtr instead of `attach` (the report is the same; `gputrace report FILE` redoes
# it offline). FLAGS [""]: more gputrace flags for every job (e.g. FLAGS=--tensors). TWIN_WORKERS: loader_inline_fixed's workers; unset, the workers that
# loader_inline's report recommends (saving.workers in OUT/loader_inline.json), else 8.
set -u
BIN=$1
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
MODES=${*:-launch_bound pageable item alloc_churn healthy_gemm healthy_train loader_disk loader_cpu contention}
mkdir -p "$OUT"
for mode in $MODES; do
  pin=()
  hogs=()
  if [ "$mode" = contention ]; then
    # Three busy processes share core 2 with the job.
    for _ in 1 2 3; do taskset -c 2 sh -c 'while :; do :; done' & hogs+=($!); done
    pin=(taskset -c 2)
  fi
  if [ "$mode" = loader_inline_fixed ] && [ -z "${TWIN_WORKERS:-}" ]; then
    recommended=$(python3 -c "import json,sys
r=json.load(open(sys.argv[1]))
print(next((d['saving']['workers'] for d in r['diagnoses'] if d['id']=='input-starved' and (d.get('saving') or {}).get('workers')), ''))" "$OUT/loader_inline.json" 2>/dev/null)
    export TWIN_WORKERS=${recommended:-8}
    echo "loader_inline_fixed: $TWIN_WORKERS workers" | tee -a "$OUT/planted.txt"
  fi
  how=(attach)
  if [ "${PLANTED_RECORD:-}" = all ] || [[ " ${PLANTED_RECORD:-} " == *" $mode "* ]]; then
    rm -f "$OUT/$mode.gtr"
    how=(record -o "$OUT/$mode.gtr")
  fi
  coproc JOB { PYTHONUNBUFFERED=1 "${pin[@]}" python3 "$HERE/planted.py" "$mode" --seconds 7 2>"$OUT/$mode.py.err"; }
  pid=$JOB_PID
  # Keep our own copies of the pipes: bash drops JOB[] as soon as the job exits.
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  if [ "$ready" != ready ]; then echo "$mode did not start: $ready"; continue; fi
  t0=$(date +%s%N)
  # shellcheck disable=SC2086 # FLAGS is a list of flags
  "$BIN" -v "${how[@]}" --pid "$pid" --duration 6 --json ${FLAGS:-} >"$OUT/$mode.json" 2>"$OUT/$mode.err" &
  gp=$!
  for _ in $(seq 1 300); do grep -q "armed: tracing" "$OUT/$mode.err" && break; sleep 0.05; done
  echo go >&"$to_job"
  wait $gp
  t1=$(date +%s%N)
  read -r -u "$from_job" done_line
  exec {from_job}<&- {to_job}>&-
  wait "$pid" 2>/dev/null
  for h in "${hogs[@]}"; do kill "$h"; done
  # gputrace's whole run: start, arming, 6 s of tracing, the report, and detaching.
  echo "$mode: $done_line, verdict $(python3 -c "import json;print(json.load(open('$OUT/$mode.json'))['verdict'])" 2>/dev/null), gputrace ran $(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/planted.txt"
done
