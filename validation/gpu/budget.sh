#!/usr/bin/env bash
# The overhead budget on real PyTorch (issue 15): steps/s of one launch-bound process
# (overhead.py's `tiny` by default: 100 one-element `add_` per step; or `eager`), measured in alternating phases of
# SECS seconds — untraced, traced by `gputrace attach` with every probe on, traced with
# `--max-overhead PCT` — REPS times, then untraced again. Each traced phase is a full attach;
# its JSON report is kept (launches estimated, tracer.sampling, tracer.overhead).
# FLAGS are added to every traced phase (e.g. FLAGS=--no-stacks). SECOND, where set, replaces
# the second traced phase's `--max-overhead PCT` (e.g. SECOND=--no-tensors: every probe on
# but the caching allocator's, against every probe on); its phases are named `second_N`.
# Usage: [SECS=3] [REPS=6] [PCT=1] [FLAGS=...] [SECOND=...] budget.sh GPUTRACE OUT_DIR [MODE]   (root)
set -u
BIN=$1
OUT=$2
MODE=${3:-tiny}
HERE=$(cd "$(dirname "$0")" && pwd)
SECS=${SECS:-3}
REPS=${REPS:-6}
PCT=${PCT:-1}
mkdir -p "$OUT"
cd "$OUT" || exit 1
rm -f to from
mkfifo to from
PYTHONUNBUFFERED=1 python3 "$HERE/overhead.py" "$MODE" <to >from 2>"$MODE.py.err" &
exec {to}>to {from}<from
read -r -u "$from" ready pid
[ "$ready" = ready ] || { echo "$MODE did not start"; exit 1; }
measure() { echo "measure $1 $SECS" >&"$to"; read -r -u "$from" line; echo "$MODE $line" | tee -a budget.txt; }
traced() { # NAME [gputrace flags...]
  local name=$1
  shift
  "$BIN" -v attach --pid "$pid" --json "$@" >"$name.json" 2>"$name.err" &
  local gp=$!
  for _ in $(seq 1 400); do grep -q "armed: tracing" "$name.err" && break; sleep 0.05; done
  measure "$name"
  kill -INT $gp
  wait $gp
}
SECOND_NAME=budget${PCT}
[ -n "${SECOND+x}" ] && SECOND_NAME=second
for r in $(seq 1 "$REPS"); do
  measure "untraced_$r"
  # shellcheck disable=SC2086 # FLAGS is a list of flags
  traced "full_$r" ${FLAGS:-}
  if [ -n "${SECOND+x}" ]; then
    # shellcheck disable=SC2086 # SECOND and FLAGS are lists of flags
    traced "second_$r" $SECOND ${FLAGS:-}
  else
    # shellcheck disable=SC2086
    traced "budget${PCT}_$r" --max-overhead "$PCT" ${FLAGS:-}
  fi
done
measure "untraced_$((REPS + 1))"
echo quit >&"$to"
exec {to}>&- {from}<&-
wait "$pid"
python3 - "$REPS" "$SECOND_NAME" "$SECS" <<'PY' | tee -a budget.txt
import json, sys
reps, second, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
for r in range(1, reps + 1):
    for name in (f"full_{r}", f"{second}_{r}"):
        rep = json.load(open(f"{name}.json"))
        t = rep["tracer"]
        s = t.get("sampling") or {}
        counted = sum(p["hits"] for p in t["probes"] if p["symbol"].startswith("cuLaunchKernel"))
        rate = next(float(l.split()[2]) for l in open("budget.txt") if l.split()[1] == name)
        per_step = rep["cuda"]["launches"]["kernels"] / (rate * rep["window"]["duration_s"])
        syncs_per_step = rep["cuda"]["syncs"]["count"] / (rate * rep["window"]["duration_s"])
        print(f"{name}: window {rep['window']['duration_s']:.2f} s, launches {rep['cuda']['launches']['kernels']} "
              f"(~{per_step:.1f} a step at the phase's steps/s; syncs ~{syncs_per_step:.2f} a step) "
              f"probes off {len(s.get('probes', []))}, "
              f"(trapped {counted}), est. overhead {t['overhead']['fraction_of_window']:.2%}, "
              f"on {s.get('on_fraction', 1):.3f}, cycles {s.get('cycles', 0)}, met {s.get('met')}, verdict {rep['verdict']}")
        # The estimate as a slowdown of the measured phase (the job idles outside it): the
        # busiest thread's estimated cost over the phase's seconds, and the model's alone.
        o = t["overhead"]
        model_s = o.get("modelled_s", 0) * (o["busiest_thread_s"] / o["estimated_s"] if o["estimated_s"] else 0)
        print(f"estimate {name.rsplit('_', 1)[0]} {r} {o['busiest_thread_s'] / secs:.4f} {model_s / secs:.4f} {o.get('basis')} "
              f"sampled {json.dumps(o.get('sampled'))}")
PY
python3 - "$MODE" <<'PY' | tee -a budget.txt
import re, statistics, sys
rates = {}
for line in open("budget.txt"):
    m = re.match(rf"{sys.argv[1]} (\S+?)_(\d+) ([\d.]+) ", line)
    if m:
        rates.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(3))
u = rates.get("untraced", {})
for kind, by_rep in rates.items():
    if kind == "untraced":
        continue
    # Each traced phase against the mean of the untraced phases around its rep.
    slow = [1 - r / ((u[i] + u[i + 1]) / 2) for i, r in by_rep.items() if i in u and i + 1 in u]
    print(f"{kind}: slowdown median {statistics.median(slow):.1%}, per rep {', '.join(f'{s:.1%}' for s in slow)}")
    est = {}
    for line in open("budget.txt"):
        f = line.split()
        if len(f) > 4 and f[0] == "estimate" and f[1] == kind:
            est[int(f[2])] = (float(f[3]), float(f[4]))
    if est:
        # A slowdown s of a phase is s of its time lost: the estimate's own terms.
        e = [est[i][0] for i in sorted(est)]
        m = [est[i][1] for i in sorted(est)]
        print(f"{kind}: estimated slowdown median {statistics.median(e):.1%} (model alone {statistics.median(m):.1%}), "
              f"per rep {', '.join(f'{x:.1%}' for x in e)}; estimate / measured {statistics.median(e) / statistics.median(slow):.2f}")
# The same on the main thread's CPU time per step (overhead.py's 4th field): the cost the
# probes add to the thread itself, without the waits for a CPU that wall time includes.
cpu = {}
for line in open("budget.txt"):
    m = re.match(rf"{sys.argv[1]} (\S+?)_(\d+) [\d.]+ \d+ ([\d.]+)$", line.strip())
    if m:
        cpu.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(3))
u = cpu.get("untraced", {})
for kind, by_rep in cpu.items():
    if kind == "untraced":
        continue
    added = [c / ((u[i] + u[i + 1]) / 2) - 1 for i, c in by_rep.items() if i in u and i + 1 in u]
    if added:
        print(f"{kind}: CPU time per step added, median {statistics.median(added):.1%}, per rep {', '.join(f'{a:.1%}' for a in added)}")
PY
