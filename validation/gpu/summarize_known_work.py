"""Compare the per-phase gputrace reports of known_work.sh with the known work."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
rows = []
for phase in ["add", "matmul_fp32", "matmul_bf16", "triton", "graph_replay", "pageable_h2d", "pinned_h2d", "cpu_d2h", "item"]:
    f = out / f"{phase}.json"
    if not f.exists() or f.stat().st_size == 0:
        rows.append(f"| {phase} | (no report) |")
        continue
    r = json.loads(f.read_text())
    c = r["cuda"]
    hits = {p["symbol"]: p["hits"] for p in r["tracer"]["probes"] if p["hits"]}
    h2d, d2h = c["copies"]["h2d"], c["copies"]["d2h"]
    rows.append(
        f"| {phase} | {c['launches']['kernels']} | {c['launches']['graphs']} | "
        f"{h2d['count']} ({h2d['pageable']} pageable, {h2d['classified']['pinned_by_map']} pinned-by-map) | "
        f"{d2h['count']} | {c['syncs']['count']} | {r['verdict']} | {r['tracer']['lost_events']} | "
        f"{', '.join(f'{k}={v}' for k, v in sorted(hits.items()))} |"
    )
print("| phase | kernels | graphs | H2D | D2H | syncs | verdict | lost | probe hits |")
print("|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
