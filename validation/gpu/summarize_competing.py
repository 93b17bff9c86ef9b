#!/usr/bin/env python3
"""summarize_competing.py OUT - predicted against measured for each competing fix.

Reads OUT/JOB_planted.json (gputrace's report on the planted job) and OUT/unseen.txt (the
"done N" of every variant, written by unseen.sh with UNSEEN_JOB=competing.py) and prints,
per job and fix, the speed-up gputrace simulated for that fix (its diagnosis's
saving.speedup and range) beside the twin's measured speed-up, and whether the fix ranked
first is the one that measured best."""
import json
import re
import sys

# Each twin, the diagnosis whose fix it is, and the form (saving.variants name) where the fix
# has several: nosync is host-sync's "sync", lognth its ranked "sync-and-bookkeeping".
FIX_OF = {"nosync": ("host-sync", "sync"), "lognth": ("host-sync", "sync-and-bookkeeping"), "nobook": ("host-bound", None), "graph": ("launch-bound", None)}
out = sys.argv[1]
done = {}
for line in open(f"{out}/unseen.txt"):
    m = re.match(r"(\S+): done (\d+)", line)
    if m:
        done[m.group(1)] = int(m.group(2))
jobs = sorted({k.rsplit("_", 1)[0] for k in done if k.endswith("_planted")})
print("| job | fix (twin) | diagnosis | rank | predicted | range | bound | measured | pred/meas |")
print("|---|---|---|---|---|---|---|---|---|")
for job in jobs:
    try:
        r = json.load(open(f"{out}/{job}_planted.json"))
    except (OSError, ValueError) as e:
        print(f"| {job} | report unreadable: {e} |")
        continue
    ids = [d["id"] for d in r["diagnoses"]]
    best_measured = None
    for variant, (fix, form) in FIX_OF.items():
        key = f"{job}_{variant}"
        if key not in done or f"{job}_planted" not in done:
            continue
        measured = done[key] / done[f"{job}_planted"]
        d = next((d for d in r["diagnoses"] if d["id"] == fix), None)
        s = (d or {}).get("saving") or {}
        v = next((v for v in s.get("variants") or [] if v["name"] == form), None)
        if v is not None:
            s = {**s, "speedup": v["speedup"], "range": v["range"]}
        pred = s.get("speedup")
        rng = s.get("range")
        rank = ids.index(fix) + 1 if fix in ids else "-"
        ratio = f"{pred / measured:.2f}" if pred else "n/a"
        print(f"| {job} | {variant} | {fix} | {rank} | {pred and f'{pred:.2f}×'} | {rng and f'{rng[0]:.2f}–{rng[1]:.2f}'} | {s.get('bound')} | {measured:.2f}× | {ratio} |")
        if best_measured is None or measured > best_measured[1]:
            best_measured = (fix, measured)
    pair = (r.get("step_model") or {}).get("best_pair")
    print(f"| {job} | verdict | {r['verdict']} | | | | | best measured: {best_measured and best_measured[0]} | {'right' if best_measured and r['verdict'] == best_measured[0] else 'WRONG'} |")
    if pair:
        print(f"| {job} | best pair | {'+'.join(pair['ids'])} | | {pair['speedup']:.2f}× | {pair['range'][0]:.2f}–{pair['range'][1]:.2f} | {pair['bound']} | | |")
