#!/usr/bin/env bash
# End-to-end overhead on real PyTorch (issue #9): steps/s of one process, measured in
# alternating phases of SECS seconds — untraced, then traced by `gputrace attach` (NVML at
# the default 10 Hz), REPS times, then untraced again; for `eager` also traced with NVML off,
# under a bare counting uprobe on cuLaunchKernel (the physical floor) and under PyTorch's
# own profiler. Each traced phase is a full attach (a report per phase, kept as JSON).
# Usage: overhead.sh GPUTRACE UPROBE_FLOOR OUT_DIR [MODE...]   (modes: eager bf16 graph)
set -u
BIN=$1
FLOOR=$2
OUT=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
MODES=${*:-eager bf16 graph}
SECS=${SECS:-4}
REPS=${REPS:-3}
mkdir -p "$OUT"
cd "$OUT" || exit 1
for mode in $MODES; do
  rm -f "to.$mode" "from.$mode"
  mkfifo "to.$mode" "from.$mode"
  PYTHONUNBUFFERED=1 python3 "$HERE/overhead.py" "$mode" <"to.$mode" >"from.$mode" 2>"$mode.py.err" &
  exec {to}>"to.$mode" {from}<"from.$mode"
  read -r -u "$from" ready pid
  if [ "$ready" != ready ]; then echo "$mode did not start"; continue; fi
  measure() { echo "$1 $2 $SECS" >&"$to"; read -r -u "$from" line; echo "$mode $line" | tee -a overhead.txt; }
  traced() { # NAME NVML_HZ
    "$BIN" -v attach --pid "$pid" --nvml-hz "$2" --json >"$mode.$1.json" 2>"$mode.$1.err" &
    local gp=$!
    for _ in $(seq 1 400); do grep -q "armed: tracing" "$mode.$1.err" && break; sleep 0.05; done
    measure measure "$1"
    kill -INT $gp
    grep VmHWM "/proc/$gp/status" 2>/dev/null | sed "s/^/$mode $1 gputrace /" >>overhead.txt
    wait $gp
  }
  for r in $(seq 1 "$REPS"); do
    [ "$REPS" = 0 ] && break
    measure measure "untraced_$r"
    traced "traced_$r" 10
  done
  measure measure "untraced_$((REPS + 1))"
  if [ "$mode" = eager ]; then
    for r in $(seq 1 "${NVML0_REPS:-2}"); do
      traced "traced_nvml0_$r" 0
      measure measure "untraced_nvml0_$r"
    done
    # The floor: one bare counting uprobe on the driver's launch entry, nothing else.
    lib=$(grep -m1 -o '/[^ ]*libcuda\.so[^ ]*' "/proc/$pid/maps")
    rm -f fl.in fl.out
    mkfifo fl.in fl.out
    "$FLOOR" "$lib" cuLaunchKernel <fl.in >fl.out 2>floor.err &
    fp=$!
    exec {fin}>fl.in {fout}<fl.out
    read -r -u "$fout" armed
    measure measure floor_cuLaunchKernel
    echo done >&"$fin"
    read -r -u "$fout" hits
    echo "$mode floor $armed $hits" | tee -a overhead.txt
    exec {fin}>&- {fout}<&-
    wait $fp
    measure measure untraced_after_floor
    measure profile torch_profiler
    measure measure untraced_last
  fi
  echo quit >&"$to"
  exec {to}>&- {from}<&-
  wait "$pid"
done
