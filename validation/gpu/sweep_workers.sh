#!/usr/bin/env bash
# `gputrace sweep` on the GPU machine (issue 16): a training job whose DataLoader forked 4
# workers after CUDA was initialised, and an idle process holding 20 GiB. The sweep must name
# exactly one idle holder (the holder) and list the workers under their job.
# Usage: sweep_workers.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
cd "$OUT" || exit 1
# shellcheck source=fifo_job.sh
. "$HERE/fifo_job.sh"
start_pair loader_cpu4 holder idle20 30
holder=$other
echo "job pid $job, holder pid $holder ($ready)" | tee workers.txt
"$BIN" sweep --duration 5 --json >sweep.json 2>sweep.err
echo "sweep exit $?" | tee -a workers.txt
"$BIN" sweep --duration 3 >sweep.txt 2>/dev/null
python3 - "$job" "$holder" <<'PY' | tee -a workers.txt
import json, sys
r = json.load(open("sweep.json"))
job, holder = int(sys.argv[1]), int(sys.argv[2])
for p in r["processes"]:
    print(p["pid"], p["state"], "worker_of", p.get("worker_of"), "parent", p.get("parent"), "mem", p["gpu_memory_bytes"], "launches", p.get("launches"), p["holds"])
# The pids started may be shells with python as their child: match by parent too.
rows = {p["pid"]: p for p in r["processes"]}
def is_(pid, started):
    return pid == started or rows.get(pid, {}).get("parent") == started
named = [d["pid"] for d in r["diagnoses"] if d["id"] == "idle-gpu-holder"]
print("idle-gpu-holder:", named, "the holder:", [p for p in named if is_(p, holder)], "others:", [p for p in named if not is_(p, holder)])
print("workers of the job:", sum(1 for p in r["processes"] if p.get("worker_of") and is_(p["worker_of"], job)))
PY
exec {jin}>&- {oin}>&-
kill $job $holder 2>/dev/null
wait
