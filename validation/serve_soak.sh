#!/usr/bin/env bash
# `gputrace serve` for a long run with jobs starting and exiting under it (issue 36): an idle
# holder all along, and a fake job started every second (each works ~20 s: 2,000 steps of 10
# launches of 1 ms kernels and a sync), so ~20 jobs run at once, and one starts and one ends
# each second: the kernel's counter map sees threads come and go all the time. Every 10 s:
# serve's resident memory and CPU time from /proc, and one scrape. At the end: memory growth over the run, CPU per core-second, and whether the
# counter map held more threads than were alive.
# Usage: serve_soak.sh GPUTRACE FAKE_CUDA_DIR OUT_DIR [SECONDS] [INTERVAL]   (root; 600, 15)
set -u
BIN=$1
FAKE=$2
OUT=$3
SECS=${4:-600}
INTERVAL=${5:-15}
mkdir -p "$OUT"
"$FAKE/fakejob" --hold-ms $(((SECS + 30) * 1000)) >/dev/null &
holder=$!
"$BIN" -vv serve --listen 127.0.0.1:0 --interval "$INTERVAL" 2>"$OUT/serve.err" &
serve=$!
for _ in $(seq 1 100); do
  addr=$(sed -n 's#.*serving http://\([^/]*\)/metrics.*#\1#p' "$OUT/serve.err")
  [ -n "$addr" ] && break
  sleep 0.1
done
ticks=$(getconf CLK_TCK)
: >"$OUT/samples.txt"
start=$(date +%s)
next=0
while [ $(($(date +%s) - start)) -lt "$SECS" ]; do
  "$FAKE/fakejob" --steps 2000 --driver-launches 10 --kernel-us 1000 --sync >/dev/null 2>&1 &
  now=$(($(date +%s) - start))
  if [ "$now" -ge "$next" ]; then
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$serve/status")
    cpu=$(awk '{print $14 + $15}' "/proc/$serve/stat")
    sweeps=$(curl -s "http://$addr/metrics" | awk '/^gputrace_sweeps_total/ {print $2}')
    echo "$now $rss $cpu $sweeps" >>"$OUT/samples.txt"
    next=$((next + 10))
  fi
  sleep 1
done
wait_jobs() { for p in $(jobs -p); do [ "$p" != "$serve" ] && [ "$p" != "$holder" ] && wait "$p" 2>/dev/null; done; }
wait_jobs
curl -s "http://$addr/metrics" >"$OUT/last.txt"
kill -TERM "$serve"
wait "$serve"
echo "serve exit $?" >"$OUT/summary.txt"
kill "$holder" 2>/dev/null
python3 - "$OUT" "$ticks" <<'PY' | tee -a "$OUT/summary.txt"
import sys
out, ticks = sys.argv[1], float(sys.argv[2])
rows = [l.split() for l in open(f"{out}/samples.txt") if len(l.split()) == 4]
t = [float(r[0]) for r in rows]; rss = [int(r[1]) for r in rows]; cpu = [float(r[2]) / ticks for r in rows]
settled = [r for r in zip(t, rss) if r[0] >= 60] or list(zip(t, rss))
print(f"{len(rows)} samples over {t[-1]:.0f} s; windows judged: {rows[-1][3]}")
print(f"RSS: first {rss[0]} kB, after 60 s {settled[0][1]} kB, last {rss[-1]} kB, max {max(rss)} kB")
print(f"CPU: {cpu[-1] - cpu[0]:.2f} s over {t[-1] - t[0]:.0f} s = {100 * (cpu[-1] - cpu[0]) / max(t[-1] - t[0], 1):.2f} % of a core")
last = open(f"{out}/last.txt").read()
print("idle holders in the last scrape:", sum(1 for l in last.splitlines() if l.startswith("gputrace_idle_gpu_holder_bytes{")))
print("lost:", [l for l in last.splitlines() if l.startswith("gputrace_lost_events_total")])
kept = [int(l.split("counter map: ")[1].split()[0]) for l in open(f"{out}/serve.err") if "counter map: " in l]
print(f"threads kept in the counter map at each window's end: max {max(kept, default=0)}, last {kept[-1] if kept else None}")
PY
