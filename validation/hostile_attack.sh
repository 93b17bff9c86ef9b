#!/usr/bin/env bash
# Issue 56's attack on root's `serve`, all at once, by plain users (nobody, uid 65534):
#  - a "libcuda.so.1" of 24 GB (sparse) whose .dynsym claims 4 GiB, mapped by a sleeper;
#  - HOLDERS sleeping GPU holders (fake jobs holding their device memory), each with a
#    128 KiB program name;
#  - 256 idle connections to /metrics from one client (127.0.0.2).
# While it lasts, a scraper on 127.0.0.1 times each scrape; at the end serve's peak resident
# memory (VmHWM) and the slowest scrape are printed. The bar: VmHWM < 256 MB, every scrape
# < 2 s.
# Usage: hostile_attack.sh GPUTRACE FAKE_CUDA_DIR OUT_DIR [HOLDERS] [SECONDS]   (root; 1000, 60)
set -u
BIN=$1
FAKE=$2
OUT=$3
HOLDERS=${4:-1000}
SECS=${5:-60}
mkdir -p "$OUT"
chmod 755 "$OUT"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

# The sparse library: the fake driver with its .dynsym's size set to 4 GiB, grown to 24 GB.
EVIL=$OUT/evil/libcuda.so.1
mkdir -p "$OUT/evil"
cp "$FAKE/libcuda.so.1" "$EVIL"
python3 - "$EVIL" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
shoff, = struct.unpack_from("<Q", b, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
for i in range(shnum):
    off = shoff + i * shentsize
    sh_type, = struct.unpack_from("<I", b, off + 4)
    if sh_type == 11:  # SHT_DYNSYM
        struct.pack_into("<Q", b, off + 32, 4 << 30)
open(p, "wb").write(b)
PY
truncate -s 24G "$EVIL"
chown -R 65534:65534 "$OUT/evil"
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c "
import mmap, time
f = open('$EVIL', 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
time.sleep($SECS + 60)" &
pids+=($!)

# The holders, as nobody, each named with 128 KiB (131 071 bytes and its NUL: the kernel's
# MAX_ARG_STRLEN), the name made inside Python (as an argument of ours it would be too long).
for _ in $(seq 1 "$HOLDERS"); do
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c "
import os
os.execv('$FAKE/fakejob', ['h' * 131071, '--hold-ms', str(($SECS + 60) * 1000), '--lib-dir', '$FAKE'])" >/dev/null 2>&1 &
  pids+=($!)
done
# Until they have all loaded the fake driver and hold their memory.
for _ in $(seq 1 120); do
  [ "$(pgrep -u 65534 -c fakejob)" -ge "$HOLDERS" ] && break
  sleep 0.5
done
echo "holders started: $(pgrep -u 65534 -c fakejob) of $HOLDERS"

"$BIN" -v serve --listen 127.0.0.1:0 --interval 5 2>"$OUT/serve.err" &
serve=$!
pids+=($serve)
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's#.*serving http://\([^/]*\)/metrics.*#\1#p' "$OUT/serve.err")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "serve did not start"; cat "$OUT/serve.err"; exit 1; }
port=${addr##*:}

# 256 idle connections from one client (127.0.0.2), held open.
python3 - "$port" "$SECS" <<'PY' &
import socket, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
held = []
for _ in range(256):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        pass
print(f"attacker: {len(held)} connections open", flush=True)
time.sleep(secs)
PY
pids+=($!)

: >"$OUT/scrapes.txt"
end=$(($(date +%s) + SECS))
while [ "$(date +%s)" -lt "$end" ]; do
  t=$( { /usr/bin/time -f %e curl -s -o /dev/null -w '%{http_code} ' --max-time 10 "http://127.0.0.1:$port/metrics"; } 2>&1 | tr '\n' ' ')
  echo "$t" >>"$OUT/scrapes.txt"
  sleep 2
done
curl -s --max-time 10 "http://127.0.0.1:$port/metrics" >"$OUT/last.metrics"
alive=$(pgrep -u 65534 -c fakejob)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$serve/status")
echo "holders alive at the end: $alive; their series in the last scrape: $(grep -c '^gputrace_process_active{' "$OUT/last.metrics"); longest line: $(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$OUT/last.metrics") bytes"
echo "holders: $HOLDERS; serve VmHWM: $((hwm / 1024)) MB"
# The one-shot sweep under the same attack: its peak resident memory and its time.
/usr/bin/time -f "sweep: %M KB peak resident, %e s" "$BIN" sweep --duration 3 --json >"$OUT/sweep.json" 2>"$OUT/sweep.err"
tail -1 "$OUT/sweep.err"
echo "scrapes (code seconds): $(wc -l <"$OUT/scrapes.txt"); slowest: $(awk '{print $2}' "$OUT/scrapes.txt" | sort -n | tail -1) s; not 200: $(grep -vc '^200 ' "$OUT/scrapes.txt")"
grep -i "skipped\|refused\|not probed" "$OUT/serve.err" | head -3
