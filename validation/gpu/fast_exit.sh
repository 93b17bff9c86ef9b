#!/usr/bin/env bash
# Start-up and exit with the real libcuda, both ways of attaching uprobes (issue 15):
# `attach --duration 3` to a warm PyTorch job, timed from the report's end of window to
# gputrace's exit; then `run` of a short job. Usage: fast_exit.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
for kind in multi perf-event multi; do
  coproc JOB { PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" launch_bound --seconds 12 2>"$OUT/job.$kind.err"; }
  pid=$JOB_PID
  exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
  read -r -u "$from_job" ready
  echo go >&"$to_job"
  sleep 2
  t0=$(date +%s%N)
  GPUTRACE_UPROBE_LINKS=$kind "$BIN" attach --pid "$pid" --duration 3 --json >"$OUT/attach.$kind.json" 2>"$OUT/attach.$kind.err"
  t1=$(date +%s%N)
  exec {from_job}<&- {to_job}>&-
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  python3 - "$OUT/attach.$kind.json" "$t0" "$t1" "$kind" <<'PY' | tee -a "$OUT/fast_exit.txt"
import json, sys
r = json.load(open(sys.argv[1])); t0, t1 = int(sys.argv[2]), int(sys.argv[3])
t = r["tracer"]; wall_ms = (t1 - t0) / 1e6
window_ms = r["window"]["duration_s"] * 1e3
launches = sum(p["hits"] for p in t["probes"] if p["symbol"].startswith("cuLaunchKernel"))
print(f"attach {sys.argv[4]}: links={t.get('uprobe_links')} probes={sum(l['symbols'] for l in t['libraries'])} "
      f"startup_ms={ {k: round(v) for k, v in (t.get('startup_ms') or {}).items()} } "
      f"window={window_ms:.0f} ms, wall={wall_ms:.0f} ms, after window={wall_ms - window_ms - t['attach_ms']:.0f} ms, "
      f"launches={launches}, verdict={r['verdict']}")
PY
done
# run: a short job, from gputrace's start to its exit.
for kind in multi perf-event; do
  t0=$(date +%s%N)
  GPUTRACE_UPROBE_LINKS=$kind "$BIN" run --json -- python3 -c "import torch; x=torch.ones(1000,device='cuda'); [x.add_(1) for _ in range(2000)]; torch.cuda.synchronize(); print(x[0].item())" >"$OUT/run.$kind.json" 2>"$OUT/run.$kind.err"
  t1=$(date +%s%N)
  python3 - "$OUT/run.$kind.json" "$t0" "$t1" "$kind" <<'PY' | tee -a "$OUT/fast_exit.txt"
import json, sys
r = json.load(open(sys.argv[1])); t0, t1 = int(sys.argv[2]), int(sys.argv[3])
t = r["tracer"]; wall_ms = (t1 - t0) / 1e6
launches = sum(p["hits"] for p in t["probes"] if p["symbol"].startswith("cuLaunchKernel"))
print(f"run {sys.argv[4]}: links={t.get('uprobe_links')} attach_ms={t['attach_ms']:.0f} window={r['window']['duration_s']*1e3:.0f} ms "
      f"wall={wall_ms:.0f} ms, after window={wall_ms - r['window']['duration_s']*1e3 - t['attach_ms']:.0f} ms, launches={launches}")
PY
done
