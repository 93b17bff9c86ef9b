#!/usr/bin/env bash
# Back-to-back attaches to short-lived jobs (issue 15): each job starts, is attached to at
# once (before or after it loads the driver), sleeps 0.5–1.5 s, forks a worker, works ~1 s in
# both processes and exits. Every attach must end with exit 0 and one JSON report.
# Usage: attach_storm.sh GPUTRACE FAKE_CUDA_DIR OUT_DIR [N]   (root; N defaults to 200)
set -u
BIN=$1
FAKE=$2
OUT=$3
N=${4:-200}
mkdir -p "$OUT"
ok=0
failed=0
: >"$OUT/storm.txt"
for i in $(seq 1 "$N"); do
  settle=$((500 + RANDOM % 1000))
  "$FAKE/fakejob" --settle-ms "$settle" --fork --steps 400 --driver-launches 10 --kernel-us 200 --sync >/dev/null &
  pid=$!
  "$BIN" attach --pid "$pid" --json >"$OUT/$i.json" 2>"$OUT/$i.err"
  code=$?
  wait "$pid" 2>/dev/null
  if [ "$code" = 0 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['verdict']" "$OUT/$i.json" 2>/dev/null; then
    ok=$((ok + 1))
    rm -f "$OUT/$i.json" "$OUT/$i.err"
  else
    failed=$((failed + 1))
    echo "run $i: exit $code: $(head -c 300 "$OUT/$i.err" | tr '\n' ' ')" | tee -a "$OUT/storm.txt"
  fi
done
echo "$ok of $N attaches produced a report; $failed failed" | tee -a "$OUT/storm.txt"
