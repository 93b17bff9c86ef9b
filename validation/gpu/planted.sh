#!/usr/bin/env bash
# For each planted job: start it, attach gputrace once it is warm, trace 6 s, keep the report.
# Usage: planted.sh GPUTRACE OUT_DIR [MODE...]
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
  coproc JOB { PYTHONUNBUFFERED=1 "${pin[@]}" python3 "$HERE/planted.py" "$mode" --seconds 7 2>"$OUT/$mode.py.err"; }
  pid=$JOB_PID
  # Keep our own copies of the pipes: bash drops JOB[] as soon as the job exits.
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  if [ "$ready" != ready ]; then echo "$mode did not start: $ready"; continue; fi
  t0=$(date +%s%N)
  "$BIN" -v attach --pid "$pid" --duration 6 --json >"$OUT/$mode.json" 2>"$OUT/$mode.err" &
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
