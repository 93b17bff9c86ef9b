#!/usr/bin/env bash
# Attach gputrace to a PyTorch process once per phase of known work (known_work.py) and
# keep each phase's JSON report. Usage: known_work.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
coproc PY { PYTHONUNBUFFERED=1 python3 "$HERE/known_work.py" 2>"$OUT/python.err"; }
PY_PID_SAVED=$PY_PID
while read -r -u "${PY[0]}" word name n rest; do
  case "$word" in
    skip) echo "skipped $name: $n $rest" | tee -a "$OUT/skipped.txt"; continue ;;
    finished) break ;;
    ready) ;;
    *) echo "unexpected: $word $name"; continue ;;
  esac
  "$BIN" -v attach --pid "$PY_PID_SAVED" --json >"$OUT/$name.json" 2>"$OUT/$name.err" &
  gp=$!
  for _ in $(seq 1 300); do grep -q "armed: tracing" "$OUT/$name.err" && break; sleep 0.05; done
  echo go >&"${PY[1]}"
  read -r -u "${PY[0]}" done_word done_name
  kill -INT $gp
  wait $gp
  echo "$name expected=$n gputrace_rc=$?" | tee -a "$OUT/phases.txt"
  echo next >&"${PY[1]}"
done
wait
