#!/usr/bin/env bash
# A recording of a real PyTorch job (issue #7): record a planted host-sync job for 6 s, then
# the offline report (text and JSON) and the Perfetto export; also a SIGKILLed recording.
# Usage: record_real.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
run_recorded() { # NAME MODE EXTRA...
  local name=$1 mode=$2
  shift 2
  coproc JOB { PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" "$mode" --seconds 9 2>"$OUT/$name.py.err"; }
  local pid=$JOB_PID
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  "$BIN" -v record --pid "$pid" -o "$OUT/$name.gtr" "$@" 2>"$OUT/$name.err" &
  gp=$!
  for _ in $(seq 1 300); do grep -q "armed: tracing" "$OUT/$name.err" && break; sleep 0.05; done
  echo go >&"$to_job"
}
run_recorded item item --duration 6
wait $gp
read -r -u "$from_job" _; exec {from_job}<&- {to_job}>&-
"$BIN" report "$OUT/item.gtr" >"$OUT/item.report.txt"
"$BIN" report "$OUT/item.gtr" --json >"$OUT/item.report.json"
"$BIN" export "$OUT/item.gtr" --perfetto "$OUT/item.perfetto.json" 2>>"$OUT/item.err"
ls -la "$OUT"/item.* | tee "$OUT/record.txt"
# Killed mid-recording: the prefix must read back.
run_recorded killed launch_bound
sleep 4
kill -9 $gp
read -r -u "$from_job" _; exec {from_job}<&- {to_job}>&-
"$BIN" report "$OUT/killed.gtr" --json >"$OUT/killed.report.json"; echo "killed report exit $?" | tee -a "$OUT/record.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/record.txt"
import json, sys
out = sys.argv[1]
for name in ("item", "killed"):
    r = json.load(open(f"{out}/{name}.report.json"))
    c = r["cuda"]
    print(name, "verdict", r["verdict"], "window", round(r["window"]["duration_s"], 2), r["window"]["stopped_by"],
          "kernels", c["launches"]["kernels"], "syncs", c["syncs"]["count"], "d2h", c["copies"]["d2h"]["count"],
          "complete", r["tracer"]["complete"], "gpu", bool(r["gpu"]))
t = json.load(open(f"{out}/item.perfetto.json"))["traceEvents"]
from collections import Counter
print("perfetto events", len(t), dict(Counter(e["ph"] for e in t)), "tracks", sorted({e["name"] for e in t if e["ph"] == "C"}))
PY
