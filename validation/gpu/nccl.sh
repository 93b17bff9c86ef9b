#!/usr/bin/env bash
# Issue 37 on one H200: a one-rank DDP job under torchrun (nccl_ddp.py), traced by
# `gputrace run` from the launcher, so that the rank is followed as torchrun starts it.
# Prints gputrace's nccl section beside the collectives the job counted itself, and any
# multi-GPU diagnosis (there should be none: one rank waits for nobody).
# Usage: nccl.sh GPUTRACE OUT_DIR      (root)
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SECS=${SECS:-8}
mkdir -p "$OUT"
"$BIN" run --json -- torchrun --standalone --nproc_per_node 1 "$HERE/nccl_ddp.py" --seconds "$SECS" >"$OUT/ddp.json" 2>"$OUT/ddp.err"
echo "gputrace rc $?" | tee "$OUT/nccl.txt"
python3 - "$OUT/ddp.json" "$OUT/ddp.err" <<'PY' | tee -a "$OUT/nccl.txt"
import json, re, sys
r = json.load(open(sys.argv[1]))
issued = next((l for l in open(sys.argv[2]) if l.startswith("issued ")), "")
print("job:", issued.strip() or "no 'issued' line")
n = r.get("nccl")
if n is None:
    print("nccl: null")
    sys.exit()
print("nccl calls", n["calls"], "wait_s", round(n["wait_s"], 3))
for op, o in n["by_op"].items():
    print(f"  {op}: {o['count']} calls, {o['bytes']} B, wait {o['wait_s']:.3f} s, in calls {o['call_s']:.3f} s")
for rank in n["ranks"]:
    print("  rank", {k: rank[k] for k in ("pid", "rank", "world_size", "local_rank", "gpu", "calls", "launches", "wait_share", "host_share", "verdict")})
m = re.search(r"allreduce_hook (\d+) allreduce_explicit (\d+) barrier (\d+)", issued)
if m:
    hook, explicit, barrier = map(int, m.groups())
    seen = n["by_op"].get("allreduce", {}).get("count", 0)
    print(f"all-reduce: job issued {hook} by the hook + {explicit} explicit (+ {barrier} barrier, which NCCL may run as one); gputrace counted {seen}")
print("verdict", r["verdict"], "| multi-GPU diagnoses:", [d["id"] for d in r["diagnoses"] if d["id"] in ("straggler", "comm-bound")])
print("probes:", [(p["symbol"], p["hits"]) for p in r["tracer"]["probes"] if p["symbol"].startswith("nccl")])
print("libraries:", [(l["path"], l["symbols"]) for l in r["tracer"]["libraries"]], "probed late:", r["tracer"]["probed_late"])
PY
