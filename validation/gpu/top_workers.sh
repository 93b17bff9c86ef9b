#!/usr/bin/env bash
# `gputrace top` on the GPU machine (issue 36): the 4-worker training job and the idle 20 GiB
# holder of serve_workers.sh, seen by `top` through a pipe (each window as text, 6 s) and on
# a pseudo-terminal (`script`), where `q` must end it within a second or two.
# Usage: [JOB_MODE=planted.py mode] top_workers.sh GPUTRACE OUT_DIR (default loader_cpu4)
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
cd "$OUT" || exit 1
# shellcheck source=fifo_job.sh
. "$HERE/fifo_job.sh"
start_pair "${JOB_MODE:-loader_cpu4}" holder idle20 45
holder=$other
echo "job pid $job, holder pid $holder ($ready)" | tee top.txt
sleep 3
timeout -s TERM 6 "$BIN" top --interval 1 >pipe.txt 2>pipe.err
echo "top through a pipe: exit $? (124: ended by timeout's SIGTERM)" | tee -a top.txt
start_ns=$(date +%s%N)
(sleep 5; printf q) | TERM=xterm timeout 20 script -qfec "stty rows 40 cols 200; exec $BIN top --interval 1" /dev/null >tty.txt 2>tty.err
code=$?
echo "top on a terminal: exit $code after $((($(date +%s%N) - start_ns) / 1000000)) ms (q sent at 5000 ms)" | tee -a top.txt
grep -c $'\e\[?1049l' tty.txt | sed 's/^/alternate screen left: /' | tee -a top.txt
echo "--- the last frame through the pipe" >>top.txt
awk '/^gputrace top — window/ {n++} {frames[n] = frames[n] $0 "\n"} END {printf "%s", frames[n]}' pipe.txt >>top.txt
exec {jin}>&- {oin}>&-
kill $job $holder 2>/dev/null
wait
