#!/usr/bin/env bash
# Each job's judgement in a sweep against attach's verdict on the same job (issue 36): for
# each planted job, a 10 s `gputrace sweep` (no tracepoints, no stacks: /proc and the probes)
# and then a 10 s `gputrace attach` (the full evidence), one after the other on the same run.
# Usage: judge_jobs.sh GPUTRACE OUT_DIR [MODE…] (default: the modes below)
set -u
BIN=$1
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(healthy_gemm launch_bound item sleepy loader_cpu4 loader_disk loader_inline pageable)
mkdir -p "$OUT"
cd "$OUT" || exit 1
# shellcheck source=fifo_job.sh
. "$HERE/fifo_job.sh"
for mode in "${modes[@]}"; do
  start_job "$mode" "$mode" 30
  pid=$!
  exec {jin}>"in.$mode" {jout}<"out.$mode"
  read -r -u "$jout" ready
  echo go >&"$jin"
  sleep 2
  "$BIN" sweep --duration 10 --json >"$mode.sweep.json" 2>"$mode.sweep.err"
  "$BIN" attach --pid "$pid" --duration 10 --json >"$mode.attach.json" 2>"$mode.attach.err"
  exec {jin}>&- {jout}<&-
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$mode ($ready) done"
done
python3 - "${modes[@]}" <<'PY' | tee judge.txt
import json, sys
print("| job | attach: verdict (impact) | sweep: verdict (ratio) | sweep's time: host / GPU wait / CPU wait / asleep | asleep in | launches/s | GPU util / SM |")
print("|---|---|---|---|---|---|---|")
for mode in sys.argv[1:]:
    try:
        a = json.load(open(f"{mode}.attach.json"))
        s = json.load(open(f"{mode}.sweep.json"))
    except Exception as e:
        print(f"| {mode} | {e} | | | | | |")
        continue
    pid = a["target"]["pid"]
    row = next((p for p in s["processes"] if p["pid"] == pid), {})
    j = row.get("judgement") or {}
    top = next((d for d in a["diagnoses"] if d["id"] == a["verdict"]), None)
    av = f'{a["verdict"]} ({top["impact"]:.2f})' if top else a["verdict"]
    d = next((d for d in j.get("diagnoses", []) if d["id"] == j.get("verdict")), None)
    sv = f'{j.get("verdict")} ({d["ratio"]:.2f})' if d else str(j.get("verdict"))
    t = j.get("time") or {}
    shares = " / ".join(f'{t.get(k, 0):.2f}' for k in ("host", "waiting_on_gpu", "waiting_for_cpu", "sleeping"))
    sleep = j.get("sleep") or {}
    asleep = ", ".join(f"{k} {v:.2f}" for k, v in sleep.items() if v >= 0.05) or "—"
    gpu = f'{(j.get("gpu_utilization") or 0):.2f} / {(j.get("sm_activity") or 0):.2f}'
    print(f'| {mode} | {av} | {sv} | {shares} | {asleep} | {j.get("launches_per_s", 0):.0f} | {gpu} |')
PY
