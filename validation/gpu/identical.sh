#!/usr/bin/env bash
# Bit-identical results with and without tracing: identical.py untraced, then under
# `gputrace run`; the parameter hashes must match.
# Usage: identical.sh GPUTRACE OUT_DIR
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
a=$(python3 "$HERE/identical.py" 2>"$OUT/identical.untraced.err")
"$BIN" run --json -- python3 "$HERE/identical.py" >"$OUT/identical.json" 2>"$OUT/identical.traced.err"
b=$(grep -E '^[0-9a-f]{64}$' "$OUT/identical.traced.err" | tail -1)
echo "untraced $a" | tee "$OUT/identical.txt"
echo "traced   $b" | tee -a "$OUT/identical.txt"
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "identical: yes" | tee -a "$OUT/identical.txt"; else echo "identical: NO" | tee -a "$OUT/identical.txt"; fi
python3 -c "import json; r=json.load(open('$OUT/identical.json')); print('traced run: verdict', r['verdict'], 'kernels', r['cuda']['launches']['kernels'], 'syncs', r['cuda']['syncs']['count'], 'h2d', r['cuda']['copies']['h2d']['count'], 'overhead', r['tracer']['overhead'])" | tee -a "$OUT/identical.txt"
