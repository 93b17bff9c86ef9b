#!/usr/bin/env bash
# End-to-end overhead on real PyTorch (issue #9): steps/s of one process, measured in
# alternating phases — untraced, traced by gputrace with NVML off, untraced, traced with NVML at
# the default 10 Hz, under a bare counting uprobe on cuLaunchKernel (the physical floor), and
# (eager only) under PyTorch's own profiler.
# Usage: overhead.sh GPUTRACE UPROBE_FLOOR OUT_DIR [MODE...]   (modes: eager bf16 graph)
set -u
BIN=$1
FLOOR=$2
OUT=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
MODES=${*:-eager bf16 graph}
SECS=${SECS:-5}
mkdir -p "$OUT"
for mode in $MODES; do
  coproc JOB { PYTHONUNBUFFERED=1 python3 "$HERE/overhead.py" "$mode" 2>"$OUT/$mode.py.err"; }
  pid=$JOB_PID
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  if [ "$ready" != ready ]; then echo "$mode did not start: $ready"; continue; fi
  measure() { echo "$1 $2 $SECS" >&"$to_job"; read -r -u "$from_job" line; echo "$mode $line" | tee -a "$OUT/overhead.txt"; }
  traced() { # NAME NVML_HZ
    "$BIN" -v attach --pid "$pid" --nvml-hz "$2" --json >"$OUT/$mode.$1.json" 2>"$OUT/$mode.$1.err" &
    local gp=$!
    for _ in $(seq 1 400); do grep -q "armed: tracing" "$OUT/$mode.$1.err" && break; sleep 0.05; done
    measure measure "$1"
    kill -INT $gp
    # gputrace's peak RSS, just before it exits (VmHWM).
    grep VmHWM /proc/$gp/status 2>/dev/null | sed "s/^/$mode $1 gputrace /" >>"$OUT/overhead.txt"
    wait $gp
  }
  measure measure untraced_a
  traced traced_nvml0 0
  measure measure untraced_b
  traced traced_nvml10 10
  measure measure untraced_c
  # The floor: one bare counting uprobe on the driver's launch entry, nothing else.
  lib=$(grep -m1 -o '/[^ ]*libcuda\.so[^ ]*' /proc/$pid/maps)
  coproc FL { "$FLOOR" "$lib" cuLaunchKernel; }
  exec {from_fl}<&"${FL[0]}" {to_fl}>&"${FL[1]}"
  read -r -u "$from_fl" armed
  measure measure floor_cuLaunchKernel
  echo done >&"$to_fl"; read -r -u "$from_fl" hits; echo "$mode floor $hits" | tee -a "$OUT/overhead.txt"
  exec {from_fl}<&- {to_fl}>&-
  if [ "$mode" = eager ]; then measure profile torch_profiler; fi
  measure measure untraced_d
  echo quit >&"$to_job"
  exec {from_job}<&- {to_job}>&-
  wait "$pid" 2>/dev/null
done
