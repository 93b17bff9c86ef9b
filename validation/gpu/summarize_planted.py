"""One line per planted report: verdict, the top diagnoses with impacts, what woke the
launching threads, and the pauses. Usage: summarize_planted.py REPORT.json..."""
import json
import sys

for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"{path}: no report ({e})")
        continue
    ta = r.get("time_account") or {}
    diags = ", ".join(f'{d["id"]} {d["impact"]:.2f}' for d in r["diagnoses"][:3])
    waits = {k: round(v, 2) for k, v in (ta.get("waits") or {}).items() if v >= 0.005}
    wakers = "; ".join(f'{w["kind"]} {w["seconds"]:.2f}s by {w["waker"]} via {w["site"]}' for w in (ta.get("wakers") or [])[:2])
    paused = [(round(p["start_s"], 1), round(p["end_s"], 1)) for p in r["window"].get("phases", []) if p["kind"] == "paused"]
    print(f'{path.rsplit("/", 1)[-1]}: verdict {r["verdict"]}; {diags}; window {r["window"]["duration_s"]:.1f}s active {r["window"].get("active_s", 0):.1f}s paused {paused}')
    print(f"    waits {waits}; {wakers}")
