#!/usr/bin/env bash
# What stack sampling costs the traced job (issue #14): steps/s of one overhead.py process in
# alternating phases of SECS seconds — untraced, traced by `gputrace attach` (stacks on: the
# 99 Hz CPU sampler, off-CPU stacks, Python frames), traced with --no-stacks — REPS times.
# Each traced phase is a full attach with its own report (kept as JSON, tracer CPU in it).
# Usage: stacks_cost.sh GPUTRACE OUT_DIR [MODE...]   (modes of overhead.py; default eager item)
set -u
BIN=$1
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
MODES=${*:-eager item}
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
  measure() { echo "measure $1 $SECS" >&"$to"; read -r -u "$from" line; echo "$mode $line" | tee -a stacks_cost.txt; }
  traced() { # NAME [gputrace options]
    local name=$1
    shift
    "$BIN" -v attach --pid "$pid" --json "$@" >"$mode.$name.json" 2>"$mode.$name.err" &
    local gp=$!
    for _ in $(seq 1 400); do grep -q "armed: tracing" "$mode.$name.err" && break; sleep 0.05; done
    measure "$name"
    kill -INT $gp
    wait $gp
  }
  for r in $(seq 1 "$REPS"); do
    measure "untraced_$r"
    traced "stacks_$r"
    traced "nostacks_$r" --no-stacks
  done
  measure "untraced_$((REPS + 1))"
  echo quit >&"$to"
  exec {to}>&- {from}<&-
  wait "$pid"
done
