"""Summarize call_cost.sh: per kind, the median ns per call untraced, under the bare-probe
floor and under each gputrace variant; what each adds over untraced; gputrace's added cost
over the floor's (the issue's bar: at most 1.5x); and gputrace's own estimate per call
(tracer.overhead.estimated_s over the calls of that phase) against the measured addition
(the bar: within +-30 %). Usage: summarize_call_cost.py OUT_DIR [--cpu]
--cpu: the same from the thread's own CPU time per call (call_cost.cu's fourth field, where the
run has it), which a VM's stolen time does not inflate."""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

out = sys.argv[1]
use_cpu = "--cpu" in sys.argv[2:]
ns = defaultdict(list)     # (kind, phase) -> [ns per call]
calls = defaultdict(list)  # (kind, phase) -> [calls]
for line in open(os.path.join(out, "call_cost.txt")):
    if line.startswith("#"):
        continue
    parts = line.split()
    if len(parts) not in (4, 5) or (use_cpu and len(parts) != 5):
        continue
    kind, phase, v, n = parts[:4]
    ns[(kind, phase)].append(float(parts[4] if use_cpu else v))
    calls[(kind, phase)].append(int(n))

# gputrace's estimate per call, per traced report (files KIND.VARIANT.REP.json), in phase order,
# and the model's alone (tracer.overhead.modelled_s: the costs measured apart, before the
# job's own CPU samples scale them), with the basis the report gave.
estimates = defaultdict(list)
modelled = defaultdict(list)
bases = defaultdict(set)
for path in sorted(glob.glob(os.path.join(out, "*.*.*.json"))):
    kind, variant, rep = os.path.basename(path)[:-5].split(".")
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        continue
    n = calls.get((kind, variant), [])
    i = int(rep) - 1
    if i < len(n) and n[i] > 0:
        o = r["tracer"]["overhead"]
        estimates[(kind, variant)].append(o["estimated_s"] * 1e9 / n[i])
        if "modelled_s" in o:
            modelled[(kind, variant)].append(o["modelled_s"] * 1e9 / n[i])
        bases[(kind, variant)].add(o.get("basis", "?"))

kinds = sorted({k for k, _ in ns}, key=lambda k: "launch item d2h h2d sync event alloc".split().index(k) if k in "launch item d2h h2d sync event alloc".split() else 99)
variants = sorted({p for _, p in ns} - {"untraced", "floor"})
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("kind      untraced  floor(+)        " + "  ".join(f"{v}(+, x floor, est)" for v in variants))
for k in kinds:
    base = med(ns[(k, "untraced")])
    floor = med(ns[(k, "floor")]) - base
    spread = (max(ns[(k, "untraced")]) - min(ns[(k, "untraced")])) if ns[(k, "untraced")] else float("nan")
    row = f"{k:8s} {base:8.0f}  {floor:+7.0f}        "
    for v in variants:
        add = med(ns[(k, v)]) - base
        est = med(estimates[(k, v)])
        ratio = (add / floor) if floor > 0 else float("nan")
        err = (est / add - 1) * 100 if add > 0 else float("nan")
        model = med(modelled[(k, v)])
        model_err = (model / add - 1) * 100 if add > 0 else float("nan")
        basis = "/".join(sorted(bases[(k, v)]))
        row += f"  {v}: {add:+6.0f} ns, {ratio:4.2f}x floor, est {est:6.0f} ns ({err:+4.0f} %, {basis}; model {model:6.0f} ns, {model_err:+4.0f} %)"
    print(row + f"   [A/A spread untraced {spread:.0f} ns]")
