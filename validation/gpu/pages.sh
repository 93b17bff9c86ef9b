#!/usr/bin/env bash
# HTML pages of real PyTorch jobs (issue 22): three planted jobs recorded for 6 s each once
# warm, each recording's report (JSON) and page (`export --html`). The pages are then
# opened in Chromium on a machine that has it (the GPU machine does not).
# Usage: [TRACE_S=6] pages.sh GPUTRACE OUT_DIR [MODE...]   (default: item pageable loader_inline)
set -u
BIN=$1
OUT=$2
shift 2
MODES=("$@")
[ ${#MODES[@]} -eq 0 ] && MODES=(item pageable loader_inline)
TRACE_S=${TRACE_S:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
for mode in "${MODES[@]}"; do
  coproc JOB { exec env PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" "$mode" --seconds $((TRACE_S + 3)) 2>"$OUT/$mode.py.err"; }
  pid=$JOB_PID
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  "$BIN" -v record --pid "$pid" -o "$OUT/$mode.gtr" --duration "$TRACE_S" 2>"$OUT/$mode.err" &
  gp=$!
  for _ in $(seq 1 300); do grep -q "armed: tracing" "$OUT/$mode.err" && break; sleep 0.05; done
  echo go >&"$to_job"
  wait $gp
  exec {from_job}<&- {to_job}>&-
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  t0=$(date +%s%N)
  "$BIN" report "$OUT/$mode.gtr" --json --html "$OUT/$mode.html" >"$OUT/$mode.report.json" 2>>"$OUT/$mode.err"
  t1=$(date +%s%N)
  python3 - "$OUT" "$mode" "$t0" "$t1" <<'PY' | tee -a "$OUT/pages.txt"
import json, os, sys
out, mode, t0, t1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = json.load(open(f"{out}/{mode}.report.json"))
d = r["diagnoses"][0] if r["diagnoses"] else {}
sites = [s["frame"] for s in d.get("sites", [])[:1]]
print(f"{mode}: verdict {r['verdict']}, top {d.get('id')} {d.get('impact', 0):.0%} at {sites}; "
      f"recording {os.path.getsize(f'{out}/{mode}.gtr') / 1e6:.1f} MB -> page {os.path.getsize(f'{out}/{mode}.html') / 1e3:.0f} kB "
      f"in {(t1 - t0) / 1e6:.0f} ms (report + page)")
PY
done
