#!/usr/bin/env python3
"""summarize_fixes.py DIR... - every fix gputrace proposed, against the twin that made it.

Issue 32's table. DIR is an output directory of unseen.sh (unseen.txt, MODE.json; also
competing.py's, run through unseen.sh) or of planted.sh (planted.txt, MODE.json). For each
planted job with a report, it lists every diagnosis at MEDIUM or above with its simulated
speed-up (saving.speedup), range and bound, and beside it the speed-up measured by the
twin that makes that diagnosis's fix (twin's steps / planted job's steps, both traced
alike), where such a twin ran. Then per job: is the verdict the fix that measured best, and
is every competing (MEDIUM+) fix covered by a twin.

The last lines count, over the twins: predictions within ±20 % of the measured speed-up,
predictions above their own bound's speed-up (none may be), and jobs ranked right. Each DIR
is one sample; where a twin was measured in more than one, a table gives its ratio in each
and their median, and how many twins' medians are within ±20 %.
"""
import json
import os
import re
import sys

from summarize_unseen import PLANTED as UNSEEN_TRUTH

# The diagnosis whose fix a twin suffix makes. `fixed` makes the job's planted cause's fix.
SUFFIX_FIX = {"graph": ("launch-bound",), "nosync": ("host-sync",), "nobook": ("host-bound",),
              "nohost": ("host-bound",), "pinned": ("pageable-copy",)}
# The planted cause of each job (its `_fixed` twin's fix); the first id is the expected one:
# the blind set's own table (summarize_unseen.py), and planted.py's jobs.
TRUTH = {
    **UNSEEN_TRUTH,
    "item": ("host-sync",),
    "pageable": ("pageable-copy", "blocking-copy"),
    "alloc_churn": ("alloc-churn",),
    "loader_inline": ("input-starved",),
    "sleepy": ("host-bound", "host-sync"),
    "checkpoint": ("checkpoint-stall",),
}
# Twins named apart from the suffix rule: twin -> (job, fixes). (planted.py's graph_tiny is
# no twin of launch_bound: it captures no optimizer step; launch_bound_graph is.)
NAMED_TWINS = {}
SEVERE = {"medium", "high", "critical"}
DONE = re.compile(r"^(\w+):\s+done\s+(\d+)")


def steps_done(directory):
    """mode -> steps done in the timed loop (the last line of a mode wins)."""
    done = {}
    for name in ("unseen.txt", "planted.txt"):
        try:
            for line in open(os.path.join(directory, name), encoding="utf-8"):
                m = DONE.match(line)
                if m:
                    done[m.group(1)] = int(m.group(2))
        except OSError:
            pass
    return done


def twins_of(done):
    """job -> [(twin mode, diagnosis ids its fix addresses)]; a job is `X` or `X_planted`."""
    twins = {}
    for mode in done:
        if mode in NAMED_TWINS:
            job, fixes = NAMED_TWINS[mode]
            twins.setdefault(job, []).append((mode, fixes))
            continue
        base, _, suffix = mode.rpartition("_")
        if not base:
            continue
        job = base if base in done else f"{base}_planted"
        if job not in done:
            continue
        if suffix == "fixed":
            twins.setdefault(job, []).append((mode, TRUTH.get(base, ())))
        elif suffix in SUFFIX_FIX:
            twins.setdefault(job, []).append((mode, SUFFIX_FIX[suffix]))
    return twins


def report(directory, job):
    try:
        return json.load(open(os.path.join(directory, f"{job}.json"), encoding="utf-8"))
    except (OSError, ValueError):
        return None


def median(values):
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def main(directories):
    within = over_bound = predicted_twins = 0
    # (job, diagnosis, twin) -> pred/meas of each directory: a directory is one sample (one
    # run; runs in different leases may land on different hosts, docs/validation.md).
    samples = {}
    ranked_right = ranked = uncovered = 0
    print("| job | diagnosis | severity | rank | predicted | range | bound | twin | measured | pred/meas |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for directory in directories:
        done = steps_done(directory)
        for job, twins in sorted(twins_of(done).items()):
            r = report(directory, job)
            if r is None:
                print(f"| {job} | (no readable report in {directory}) |")
                continue
            diagnoses = r.get("diagnoses") or []
            severe = [d for d in diagnoses if d.get("severity") in SEVERE]
            measured_of = {}
            # A suffix twin makes the report's fix as its basis says it (pageable_inputs_pinned
            # pins the source; its _fixed twin stages into pinned buffers on the training
            # thread): where both make one diagnosis's fix, the suffix twin is the one compared.
            for twin, fixes in sorted(twins, key=lambda t: not t[0].endswith("_fixed")):
                if done.get(job):
                    for fix in fixes[:1]:
                        measured_of[fix] = (twin, done[twin] / done[job])
            best = max(measured_of.items(), key=lambda kv: kv[1][1], default=None)
            for rank, d in enumerate(diagnoses, 1):
                if d.get("severity") not in SEVERE and d["id"] not in measured_of:
                    continue
                s = d.get("saving") or {}
                pred, rng, bound = s.get("speedup"), s.get("range"), s.get("bound")
                twin, measured = measured_of.get(d["id"], (None, None))
                ratio = ""
                if pred and measured:
                    predicted_twins += 1
                    ratio = f"{pred / measured:.2f}"
                    within += abs(pred / measured - 1.0) <= 0.20
                    samples.setdefault((job, d["id"], twin), []).append(pred / measured)
                # No fix makes the step shorter than the GPU's busy time: at most 1 / the
                # lowest busy share the evidence allows.
                busy = ((r.get("step_model") or {}).get("gpu_busy") or [None])[0]
                if pred and ((rng and pred > rng[1] * 1.0001) or (busy and pred > 1.0001 / busy)):
                    over_bound += 1
                print(f"| {job} | {d['id']} | {d.get('severity')} | {rank} | "
                      f"{f'{pred:.2f}×' if pred else '-'} | "
                      f"{f'{rng[0]:.2f}–{rng[1]:.2f}' if rng else '-'} | {bound or '-'} | "
                      f"{twin or '-'} | {f'{measured:.2f}×' if measured else '-'} | {ratio} |")
            missing = [d["id"] for d in severe if d["id"] not in measured_of]
            if len(severe) >= 2 and missing:
                uncovered += 1
            verdict = r.get("verdict")
            # Twins within 5 % of each other are a tie: that is the run-to-run spread of these
            # timed loops (docs/validation.md), so either fix first is right.
            chosen = measured_of.get(verdict, (None, None))[1]
            tie = best is not None and chosen is not None and chosen >= best[1][1] / 1.05
            right = best is not None and (verdict == best[0] or tie or verdict in TRUTH.get(job, ()) and best[0] in TRUTH.get(job, ()))
            if best is not None and len(measured_of) >= 2:
                ranked += 1
                ranked_right += right
            # One twin only, not the verdict's: nothing to rank against.
            judged = ('right (a tie)' if tie and verdict != best[0] else 'right') if right else 'WRONG'
            if len(measured_of) < 2 and not right and verdict not in measured_of:
                judged = "not ranked (one twin, not the verdict's)"
            print(f"| {job} | **verdict {verdict}** | | | | | | best measured: {best and best[0]} "
                  f"({best and f'{best[1][1]:.2f}×'}) | {judged}"
                  f"{'; no twin for ' + ', '.join(missing) if len(severe) >= 2 and missing else ''} | |")
    if any(len(v) > 1 for v in samples.values()):
        print()
        print("| job | diagnosis | twin | pred/meas per directory | median |")
        print("|---|---|---|---|---|")
        for (job, diagnosis, twin), ratios in sorted(samples.items()):
            print(f"| {job} | {diagnosis} | {twin} | {', '.join(f'{x:.2f}' for x in ratios)} | {median(ratios):.2f} |")
        by_median = sum(abs(median(v) - 1.0) <= 0.20 for v in samples.values())
        print()
        print(f"twins whose median prediction is within ±20 %: {by_median} of {len(samples)}")
    print()
    print(f"predictions within ±20 % of the twin: {within} of {predicted_twins}")
    print(f"predictions above their range's top or the GPU floor: {over_bound}")
    print(f"jobs with two or more twins ranked right: {ranked_right} of {ranked}")
    print(f"jobs with two MEDIUM+ diagnoses and a fix without a twin: {uncovered}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: summarize_fixes.py DIR...")
    main(sys.argv[1:])
