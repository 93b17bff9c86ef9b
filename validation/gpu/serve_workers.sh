#!/usr/bin/env bash
# `gputrace serve` on the GPU machine (issue 36): a training job whose DataLoader forked 4
# workers after CUDA was initialised, and an idle process holding 20 GiB, under `serve
# --interval 10`. Scraped three times over HTTP; a JSON sweep of the same host beside it; and
# serve's own CPU and memory over the run, from /proc.
# Usage: serve_workers.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
cd "$OUT" || exit 1
# shellcheck source=fifo_job.sh
. "$HERE/fifo_job.sh"
start_pair loader_cpu4 holder idle20 75
holder=$other
echo "job pid $job, holder pid $holder ($ready)" | tee serve.txt
"$BIN" -v serve --listen 127.0.0.1:9400 --interval 10 2>serve.err &
serve=$!
scrape() { python3 -c 'import sys, urllib.request; r = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10); sys.stdout.write(r.headers.get("content-type") + "\n" + r.read().decode())'; }
usage() { awk '{print "cpu_ticks", $14 + $15}' "/proc/$serve/stat"; grep VmRSS "/proc/$serve/status"; }
sleep 13
scrape >scrape1.txt 2>&1; usage >>usage.txt
"$BIN" sweep --duration 10 --json >sweep.json 2>sweep.err
sleep 2
scrape >scrape2.txt 2>&1; usage >>usage.txt
sleep 20
scrape >scrape3.txt 2>&1; usage >>usage.txt
echo "serve up $(( $(date +%s) - $(stat -c %Y serve.err) )) s; clock ticks/s $(getconf CLK_TCK)" >>usage.txt
kill -TERM $serve
wait $serve
echo "serve exit $?" | tee -a serve.txt
python3 - "$job" "$holder" <<'PY' | tee -a serve.txt
import json, re, sys
job, holder = int(sys.argv[1]), int(sys.argv[2])
r = json.load(open("sweep.json"))
rows = {p["pid"]: p for p in r["processes"]}
def is_(pid, started):
    return pid == started or rows.get(pid, {}).get("parent") == started
print("sweep idle-gpu-holder:", [(d["pid"], is_(d["pid"], holder), d["gpu_memory_bytes"]) for d in r["diagnoses"] if d["id"] == "idle-gpu-holder"])
print("sweep gpu:", [(d["index"], d.get("utilization_pct"), d.get("sm_activity_pct"), d["memory_used_bytes"]) for d in r["gpu"]["devices"]])
for n in (1, 2, 3):
    text = open(f"scrape{n}.txt").read()
    pick = lambda name: [l for l in text.splitlines() if l.startswith(name)]
    print(f"scrape {n}:", text.splitlines()[0])
    for name in ("gputrace_gpu_utilization_ratio", "gputrace_gpu_sm_activity_ratio", "gputrace_idle_gpu_holder_bytes", "gputrace_process_active", "gputrace_process_kernel_launches_per_second", "gputrace_sweeps_total", "gputrace_lost_events_total", "gputrace_tracer_cpu_seconds_total"):
        for l in pick(name):
            print("  ", l)
PY
exec {jin}>&- {oin}>&-
kill $job $holder 2>/dev/null
wait
