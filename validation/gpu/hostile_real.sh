#!/usr/bin/env bash
# Issue 20 on real CUDA (a PyTorch job on the H200), as root:
#  1. `run` passes SIGTERM on to the job and reports how it ended (exit_signal 15, 143);
#  2. `record -o /dev/null` writes through the device: /dev/null stays a character device;
#  3. an existing recording is kept without --force, and never replaced by its own export;
#     `export --perfetto -` streams to stdout;
#  4. the report's trap costs (measured on this kernel) and the first-instruction kind of
#     every libcuda symbol that fired.
# Usage: hostile_real.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
mkdir -p "$OUT"
LOOP='import torch, time
x = torch.ones(1, device="cuda")
t = time.time()
while time.time() - t < 60:
    x.add_(1); x.item()'
log() { echo "$*" | tee -a "$OUT/hostile.txt"; }

# 1. SIGTERM to `run`.
"$BIN" -v run --json --nvml-hz 0 -- python3 -c "$LOOP" >"$OUT/sigterm.json" 2>"$OUT/sigterm.err" &
gp=$!
for _ in $(seq 1 300); do grep -q "armed: tracing" "$OUT/sigterm.err" && break; sleep 0.05; done
sleep 6
kill -TERM $gp
wait $gp
log "sigterm: rc=$? $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["target"]; print("exit_code", t["exit_code"], "exit_signal", t["exit_signal"], "stopped_by", r["window"]["stopped_by"], "kernels", r["cuda"]["launches"]["kernels"])' "$OUT/sigterm.json")"

# 2. A recording into /dev/null.
before=$(stat -c '%F %t:%T' /dev/null)
"$BIN" record --nvml-hz 0 --duration 4 -o /dev/null -- python3 -c "$LOOP" >/dev/null 2>"$OUT/devnull.err"
log "devnull: rc=$? before='$before' after='$(stat -c '%F %t:%T' /dev/null)'"

# 3. Existing files and inputs.
"$BIN" record --nvml-hz 0 --duration 4 -o "$OUT/job.gtr" -- python3 -c "$LOOP" >/dev/null 2>"$OUT/job.err"
sum=$(sha256sum <"$OUT/job.gtr")
"$BIN" record --nvml-hz 0 --duration 1 -o "$OUT/job.gtr" -- true 2>>"$OUT/job.err"
log "record over existing: rc=$? kept=$([ "$(sha256sum <"$OUT/job.gtr")" = "$sum" ] && echo yes || echo NO)"
"$BIN" export "$OUT/job.gtr" --perfetto "$OUT/job.gtr" --force 2>>"$OUT/job.err"
log "export over its input: rc=$? kept=$([ "$(sha256sum <"$OUT/job.gtr")" = "$sum" ] && echo yes || echo NO)"
"$BIN" export "$OUT/job.gtr" --perfetto - 2>>"$OUT/job.err" | python3 -c 'import json,sys; print("export to stdout:", len(json.load(sys.stdin)["traceEvents"]), "events")' | tee -a "$OUT/hostile.txt"

# 4. Trap costs and entry kinds on the real libcuda.
python3 - "$OUT/sigterm.json" <<'PY' | tee -a "$OUT/hostile.txt"
import json, sys
o = json.load(open(sys.argv[1]))["tracer"]["overhead"]
print("basis", o["basis"], "measured", o["measured"])
for p in o["per_probe"]:
    print(f'  {p["symbol"]:32} {str(p["entry"]):8} entry {p["entry_ns"]:7.0f} ns return {p["return_ns"]:6.0f} ns hits {p["hits"]:8} cost {p["cost_s"]:.4f} s')
PY
