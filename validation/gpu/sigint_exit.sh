#!/usr/bin/env bash
# SIGINT to exit with the real libcuda (issue 63): `gputrace attach` to a warm PyTorch job
# (planted.py launch_bound) for 3 s, then SIGINT; the time from the signal until gputrace is
# gone, its report printed. N rounds per binary, the binaries interleaved on the same job.
# Usage: sigint_exit.sh OUT_DIR ROUNDS BIN [BIN...]
set -u
OUT=$1; ROUNDS=$2; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# exec: the coprocess is python itself, so the kill below ends the job, not a subshell over it.
coproc JOB { PYTHONUNBUFFERED=1 exec python3 "$HERE/planted.py" launch_bound --seconds 600 2>"$OUT/job.err"; }
pid=$JOB_PID
exec {from_job}<&"${JOB[0]}" {to_job}>&"${JOB[1]}"
read -r -u "$from_job" ready
echo go >&"$to_job"
sleep 3
for round in $(seq "$ROUNDS"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    "$bin" attach --pid "$pid" --json >"$OUT/r$round.b$i.json" 2>"$OUT/r$round.b$i.err" &
    tracer=$!
    sleep 3
    t0=$(date +%s%N)
    kill -INT "$tracer"
    wait "$tracer"
    rc=$?
    t1=$(date +%s%N)
    python3 - "$OUT/r$round.b$i.json" "$t0" "$t1" "$bin" "$rc" <<'PY' | tee -a "$OUT/sigint_exit.txt"
import json, sys
path, t0, t1, binary, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
r = json.load(open(path))
m = (r.get("cpu") or {}).get("main_thread") or {}
launches = sum(p["hits"] for p in r["tracer"]["probes"] if p["symbol"].startswith("cuLaunchKernel"))
print(f"{binary}: rc={rc} sigint_to_exit_ms={(t1 - t0) / 1e6:.0f} stopped_by={r['window']['stopped_by']} "
      f"launches={launches} on_cpu_s={m.get('on_cpu_s')} runqueue_s={m.get('runqueue_s')} sleep_s={m.get('sleep_s')} "
      f"verdict={r['verdict']} notes={len(r['tracer']['notes'])}")
PY
  done
done
exec {from_job}<&- {to_job}>&-
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
python3 - "$OUT/sigint_exit.txt" <<'PY' | tee -a "$OUT/sigint_exit.txt"
import re, statistics, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+): rc=\d+ sigint_to_exit_ms=(\d+)", line)
    if m:
        by[m.group(1)].append(int(m.group(2)))
for b, v in by.items():
    print(f"median {b}: {statistics.median(v)} ms over {len(v)} ({min(v)}-{max(v)})")
PY
