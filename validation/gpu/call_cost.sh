#!/usr/bin/env bash
# The cost of one traced CUDA call, per kind, on the real driver (issue 34). Builds
# call_cost.cu, starts it once, and for each kind alternates phases of SECS seconds in that
# one process: untraced; under the bare-probe floor (gputrace-uprobe-floor --like-gputrace:
# the very traps gputrace sets in libcuda, each only counting); under `gputrace attach`
# (and the variants in VARIANTS). REPS rounds; summarize_call_cost.py takes medians.
# Every traced phase keeps its report (tracer.overhead is gputrace's own estimate).
# Usage: call_cost.sh GPUTRACE UPROBE_FLOOR OUT_DIR [KIND...]
#   kinds: launch item d2h h2d sync event alloc (default: all)
#   VARIANTS: space-separated names, each traced phase run once per variant:
#     default   gputrace attach as shipped
#     nostacks  with --no-stacks
#     everycopy every copy record wakes the reader (GPUTRACE_PROMPT_EVERY_COPY=1: the old way)
#     nonvml    with --nvml-hz 0 (no NVML sampling thread)
#     perflinks per-probe perf-event uprobes, as the floor uses (GPUTRACE_UPROBE_LINKS=perf-event)
#     nostats   the kernel's run-time accounting of BPF programs off (GPUTRACE_BPF_STATS=off)
#     entryonly with --entry-only (no return probes)
#     alt       the build at $ALT_BIN instead of GPUTRACE (another build, A/B in one process)
#     budget1   with --max-overhead 1 (the overhead budget: probes taken off part of the time)
set -u
BIN=$1
FLOOR=$2
OUT=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
KINDS=${*:-launch item d2h h2d sync event alloc}
SECS=${SECS:-2}
REPS=${REPS:-3}
VARIANTS=${VARIANTS:-default nostacks everycopy}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$OUT"
cd "$OUT" || exit 1
"$NVCC" -O2 -o call_cost "$HERE/call_cost.cu" || { echo "FAIL: nvcc could not build call_cost.cu"; exit 1; }
rm -f to.job from.job
mkfifo to.job from.job
CALL_COST_SLICE_MS=${CALL_COST_SLICE_MS:-0} ./call_cost <to.job >from.job 2>job.err &
exec {to}>to.job {from}<from.job
read -r -u "$from" ready pid
[ "$ready" = ready ] || { echo "call_cost did not start: $(cat job.err)"; exit 1; }
lib=$(grep -m1 -o '/[^ ]*libcuda\.so[^ ]*' "/proc/$pid/maps")
echo "# libcuda: $lib" | tee call_cost.txt
measure() { # KIND PHASE
  echo "measure $1 $SECS" >&"$to"
  read -r -u "$from" kind ns calls cpu
  echo "$kind $2 $ns $calls ${cpu:-}" | tee -a call_cost.txt
}
traced() { # KIND VARIANT REP
  local args=() envs=() bin=$BIN
  case $2 in
    nostacks) args=(--no-stacks) ;;
    everycopy) envs=(GPUTRACE_PROMPT_EVERY_COPY=1) ;;
    nonvml) args=(--nvml-hz 0) ;;
    perflinks) envs=(GPUTRACE_UPROBE_LINKS=perf-event) ;;
    nostats) envs=(GPUTRACE_BPF_STATS=off) ;;
    entryonly) args=(--entry-only) ;;
    alt) bin=$ALT_BIN ;;
    budget1) args=(--max-overhead 1) ;;
  esac
  env "${envs[@]}" "$bin" -v attach --pid "$pid" --json "${args[@]}" >"$1.$2.$3.json" 2>"$1.$2.$3.err" &
  local gp=$!
  for _ in $(seq 1 400); do grep -q "armed: tracing" "$1.$2.$3.err" && break; sleep 0.05; done
  measure "$1" "$2"
  kill -INT $gp
  wait $gp
}
for kind in $KINDS; do
  for rep in $(seq 1 "$REPS"); do
    measure "$kind" untraced
    rm -f fl.in fl.out
    mkfifo fl.in fl.out
    "$FLOOR" "$lib" --like-gputrace <fl.in >fl.out 2>floor.err &
    fp=$!
    exec {fin}>fl.in {fout}<fl.out
    read -r -u "$fout" armed symbols
    [ "$armed" = armed ] && measure "$kind" floor
    echo done >&"$fin"
    read -r -u "$fout" _ hits
    exec {fin}>&- {fout}<&-
    wait $fp
    echo "# floor: $symbols symbols, $hits hits" >>call_cost.txt
    for variant in $VARIANTS; do
      traced "$kind" "$variant" "$rep"
    done
  done
done
echo quit >&"$to"
wait
python3 "$HERE/summarize_call_cost.py" "$OUT" | tee call_cost.summary.txt
