#!/usr/bin/env bash
# `gputrace sweep` on the GPU machine (issue #8): a PyTorch job that works (launch-bound loop)
# and a second process that allocates 1 GiB and sleeps; the sweep must call the job active and
# the sleeper idle with its memory.
# Usage: sweep_real.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
cd "$OUT" || exit 1
# shellcheck source=fifo_job.sh
. "$HERE/fifo_job.sh"
start_pair launch_bound sleeper idle 25
sleeper=$other
echo "job pid $job, sleeper pid $sleeper ($ready)" | tee sweep.txt
"$BIN" -v sweep --duration 5 --json >sweep.json 2>sweep.err
echo "sweep exit $?" | tee -a sweep.txt
python3 - "$job" "$sleeper" <<'PY' | tee -a sweep.txt
import json, sys
r = json.load(open("sweep.json"))
want = {int(sys.argv[1]): "job", int(sys.argv[2]): "sleeper"}
for p in r["processes"]:
    # python may be a child of the pid we started (a shell in between): match by parent too.
    who = want.get(p["pid"]) or want.get(p.get("parent") or -1) or "other"
    print(who, p["pid"], p["state"], "mem", p["gpu_memory_bytes"], "launches", p.get("launches"), "last", p["last_activity_s"], p["command"][:40])
for d in r["diagnoses"]:
    print("diagnosis", d["id"], d["severity"], d["summary"][:150])
print("tracer", {k: v for k, v in r["tracer"].items() if k != "notes"})
PY
exec {jin}>&- {oin}>&-
kill $job $sleeper 2>/dev/null
wait
