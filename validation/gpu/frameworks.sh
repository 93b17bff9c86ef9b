#!/usr/bin/env bash
# Issue 35 on the H200: each framework's job (frameworks.py) under `gputrace run`; prints
# the framework gputrace named, the verdict, the first site with its split inside the
# framework, the fix, and the memory notes. A framework not installed is skipped.
# Usage: frameworks.sh GPUTRACE OUT_DIR [MODE...]     (modes: lightning jax hf pytorch)
# FRAMEWORKS_RECORD [""]: modes (space separated) traced with `record -o OUT/MODE.gtr` instead
# of `run` (the same report; `gputrace report FILE` redoes it offline).
set -u
BIN=$1
OUT=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
MODES=${*:-lightning jax hf pytorch}
SECS=${SECS:-6}
mkdir -p "$OUT"
for mode in $MODES; do
  # With --json the job's own output goes to stderr, beside gputrace's.
  how=(run)
  [[ " ${FRAMEWORKS_RECORD:-} " == *" $mode "* ]] && how=(record -o "$OUT/$mode.gtr")
  "$BIN" "${how[@]}" --json -- python3 "$HERE/frameworks.py" "$mode" --seconds "$SECS" >"$OUT/$mode.json" 2>"$OUT/$mode.err"
  rc=$?
  if grep -q "is not installed here" "$OUT/$mode.err"; then
    echo "== $mode: skipped ($(grep -m1 'not installed' "$OUT/$mode.err"))" | tee -a "$OUT/frameworks.txt"
    continue
  fi
  python3 - "$OUT/$mode.json" "$mode" "$rc" "$(grep -m1 '^done ' "$OUT/$mode.err")" <<'PY' | tee -a "$OUT/frameworks.txt"
import json, sys
path, mode, rc, done = sys.argv[1:5]
try:
    r = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"== {mode}: no report ({e}); gputrace rc {rc}")
    sys.exit()
print(f"== {mode}: {done}; gputrace rc {rc}; framework {r['target'].get('framework')}; verdict {r['verdict']}")
for d in r["diagnoses"][:3]:
    speedup = (d.get("saving") or {}).get("speedup")
    shown = "" if speedup is None else f" x{speedup:.2f}"
    print(f"   [{d['severity']}] {d['id']}{shown}")
    for site in d["sites"][:2]:
        print(f"      at {site['frame']} ({site['share']:.0%})")
        inside = site.get("inside")
        if inside:
            print(f"         inside {inside['package']}: " + "; ".join(f"{p['share']:.0%} {p['frame']}" for p in inside["parts"]))
    print(f"      fix: {d['fix']}")
for d in r["diagnoses"]:
    if d["id"] == "memory-reserved":
        print(f"   memory-reserved: {d['summary']}\n      fix: {d['fix']}")
for dev in (r.get("gpu") or {}).get("devices", []):
    print(f"   GPU {dev['index']}: link under load {dev.get('pcie_under_load')}, max Gen{dev.get('pcie_max_gen')} x{dev.get('pcie_max_width')}, NUMA node {dev.get('numa_node')}")
for n in r.get("notes", []) + r["tracer"].get("notes", []):
    if any(w in n for w in ("XLA", "PYTORCH_CUDA_ALLOC_CONF", "preallocat", "memory", "gputrace doctor")):
        print(f"   note: {n}")
PY
done
