"""Predicted against measured: for each planted job with a fixed twin, the speed-up that
gputrace's verdict promised (its diagnosis's saving: steps/s after the fix over steps/s
traced) beside the speed-up the twin really ran (steps done by the twin over steps done by
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
    steps = (r.get("steps") or {}).get("per_second")
    after = ((d or {}).get("saving") or {}).get("steps_per_s_after")
    predicted = after / steps if after and steps else None
    measured = done[twin] / done[job]
    ratio = f"{predicted / measured:.2f}" if predicted else "n/a"
    shown = f"{predicted:.2f}×" if predicted else "n/a"
    print(f"| {job} | {r['verdict']} | {shown} | {measured:.2f}× ({done[job]} → {done[twin]} steps) | {ratio} |")
