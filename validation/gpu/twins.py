"""Predicted against measured: for each planted job with a fixed twin, the speed-up that
gputrace's verdict promised (its diagnosis's saving: the same work in 1 − fraction of the
time, i.e. 1 / (1 − saving.fraction), which is steps_per_s_after / steps.per_second where
steps were found) beside the speed-up the twin really ran (steps done by the twin over steps done by
the planted job, both traced the same way for the same time, from planted.txt).
Usage: twins.py PLANTED_OUT_DIR"""
import json
import re
import sys

out = sys.argv[1]
done = {}
for line in open(f"{out}/planted.txt"):
    m = re.match(r"(\w+): done (\d+),", line)
    if m:
        done[m.group(1)] = int(m.group(2))
print("| job | verdict | predicted speed-up | twin measured | predicted / measured |")
print("|---|---|---|---|---|")
for job in sorted(done):
    twin = f"{job}_fixed"
    if twin not in done:
        continue
    r = json.load(open(f"{out}/{job}.json"))
    d = next((d for d in r["diagnoses"] if d["id"] == r["verdict"]), None)
    fraction = ((d or {}).get("saving") or {}).get("fraction")
    predicted = 1.0 / (1.0 - fraction) if fraction is not None and fraction < 1.0 else None
    measured = done[twin] / done[job]
    ratio = f"{predicted / measured:.2f}" if predicted else "n/a"
    shown = f"{predicted:.2f}×" if predicted else "n/a"
    print(f"| {job} | {r['verdict']} | {shown} | {measured:.2f}× ({done[job]} → {done[twin]} steps) | {ratio} |")
