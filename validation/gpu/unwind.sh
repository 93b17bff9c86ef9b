#!/usr/bin/env bash
# Issue 33 on the real driver: native stacks without frame pointers. Builds unwind.cu with
# plain `nvcc -O2` (no frame-pointer flags), runs it under `gputrace run` with the sync
# spinning and then sleeping (--blocking), and checks that the planted functions are the
# first sites: trainer::prepare_batch (host-bound), trainer::read_loss (host-sync),
# trainer::grow_cache (memory-growth); prints tracer.stacks. Then the job's own steps/s with
# stacks on and off (the kernel side's copies are paid by the job). Last, a PyTorch job
# (planted.py item) under `attach` must keep its Python line (planted.py) as the sync's site.
# Usage: unwind.sh GPUTRACE OUT_DIR        (NVCC=/path/to/nvcc if nvcc is not on PATH)
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$OUT"
"$NVCC" -O2 -o "$OUT/unwind_job" "$HERE/unwind.cu" || { echo "FAIL: nvcc could not build unwind.cu" | tee -a "$OUT/unwind.txt"; exit 1; }
# No frame pointers, as a user's build: the host compiler at -O2 omits them; say whether the
# planted function sets one up anyway (it should not).
objdump -d --no-show-raw-insn "$OUT/unwind_job" | awk '/<_ZN7trainer9read_loss/,/ret/' | head -8 >"$OUT/read_loss.asm"
grep -q "mov *%rsp,%rbp" "$OUT/read_loss.asm" && echo "note: read_loss keeps a frame pointer" | tee -a "$OUT/unwind.txt"

check() { # JSON LABEL
  python3 - "$1" "$2" <<'PY' | tee -a "$OUT/unwind.txt"
import json, sys
r = json.load(open(sys.argv[1])); label = sys.argv[2]
print(f"== {label}: verdict {r['verdict']}; tracer.stacks {json.dumps({k: v for k, v in (r['tracer'].get('stacks') or {}).items() if k != 'processes'})}; "
      f"loss.stack_copy_failed {r['tracer']['loss'].get('stack_copy_failed')}")
for d in r["diagnoses"]:
    print(f"   {d['id']}: " + "; ".join(f"{s['frame']} ({s['share']:.2f}, {s.get('stacks')} stacks)" for s in d["sites"]))
want = {"host-bound": "prepare_batch", "host-sync": "read_loss", "memory-growth": "grow_cache"}
ids = {d["id"]: d for d in r["diagnoses"]}
for id_, fn in want.items():
    d = ids.get(id_) or (ids.get("cpu-starved") if id_ == "host-bound" else None)
    if d is None:
        print(f"   CHECK {id_}: not diagnosed")
        continue
    first = d["sites"][0]["function"] if d["sites"] else "(no site)"
    print(f"   {'PASS' if fn in first else 'FAIL'} {id_}: first site {first!r}, want {fn}")
PY
}

for mode in spin blocking; do
  flag=""; [ "$mode" = blocking ] && flag=--blocking
  "$BIN" run --json -- "$OUT/unwind_job" --seconds 8 $flag >"$OUT/unwind.$mode.json" 2>"$OUT/unwind.$mode.err"
  check "$OUT/unwind.$mode.json" "nvcc -O2 job, sync $mode"
done

# The job's own pace: untraced, traced with stacks, traced with --no-stacks (3 each).
for rep in 1 2 3; do
  echo "untraced: $("$OUT/unwind_job" --seconds 5 | cut -d' ' -f1-4)" | tee -a "$OUT/unwind.txt"
  "$BIN" run --json -- "$OUT/unwind_job" --seconds 5 >"$OUT/pace.stacks.$rep.json" 2>"$OUT/pace.stacks.$rep.err"
  echo "stacks: $(grep -ho 'steps [0-9]* steps_per_s [0-9.]*' "$OUT/pace.stacks.$rep.err" "$OUT/pace.stacks.$rep.json" | head -1)" | tee -a "$OUT/unwind.txt"
  "$BIN" run --json --no-stacks -- "$OUT/unwind_job" --seconds 5 >"$OUT/pace.nostacks.$rep.json" 2>"$OUT/pace.nostacks.$rep.err"
  echo "no-stacks: $(grep -ho 'steps [0-9]* steps_per_s [0-9.]*' "$OUT/pace.nostacks.$rep.err" "$OUT/pace.nostacks.$rep.json" | head -1)" | tee -a "$OUT/unwind.txt"
done

# PyTorch: the Python line stays the site.
coproc JOB { PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" item --seconds 12 2>"$OUT/torch.err"; }
pid=$JOB_PID
exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
read -r -u "$from_job" ready
echo go >&"$to_job"
sleep 2
"$BIN" attach --pid "$pid" --duration 5 --json >"$OUT/torch.json" 2>"$OUT/torch.attach.err"
exec {from_job}<&- {to_job}>&-
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
python3 - "$OUT/torch.json" <<'PY' | tee -a "$OUT/unwind.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== PyTorch item: verdict {r['verdict']}; tracer.stacks {json.dumps({k: v for k, v in (r['tracer'].get('stacks') or {}).items() if k != 'processes'})}")
sync = next((d for d in r["diagnoses"] if d["id"] == "host-sync"), None)
site = (sync or {}).get("sites", [{}])[0] if sync and sync["sites"] else {}
ok = (site.get("file") or "").endswith("planted.py")
print(f"   {'PASS' if ok else 'FAIL'} host-sync first site {site.get('frame')!r}, want a line of planted.py")
PY
