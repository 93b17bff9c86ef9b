#!/usr/bin/env python3
"""
NAME
    summarize_unseen.py - score gputrace's reports on the blind test set

SYNOPSIS
    python3 summarize_unseen.py OUT_DIR

DESCRIPTION
    Reads what unseen.sh left in OUT_DIR (MODE.json reports and unseen.txt)
    and the cause markers in unseen.py (trailing comments "CAUSE mode..."
    after a hash sign), and prints a markdown table, one row per mode:

      verdict          the report's top-level "verdict"
      verdict right?   planted: the verdict is one of the mode's acceptable ids;
                       healthy: it is, and no other diagnosis is "high"
      top site         the first site of the verdict's diagnosis (its frame)
      site right?      "top" if that site is unseen.py at the CAUSE line,
                       "top-3 (#k)" if the CAUSE line is the k-th of its first
                       three sites, "no" otherwise
      predicted        1 / (1 - saving.fraction) of the verdict's diagnosis
      measured         done N of MODE_fixed / done N of MODE (unseen.txt)
      pred/meas        their ratio

    Missing or unreadable files are reported as such, never a crash.  The
    last lines count right verdicts and sites over the planted modes that
    have a report, and healthy modes without a false alarm.
"""

import io
import json
import os
import re
import sys
import tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
UNSEEN_PY = os.path.join(HERE, "unseen.py")

# mode -> acceptable verdict ids (the first is the expected one)
PLANTED = {
    "metrics_sync": ("host-sync",),
    "nan_guard": ("host-sync", "blocking-copy"),
    "tokenize_inline": ("host-bound", "input-starved"),
    "numpy_augment": ("input-starved",),
    "pageable_inputs": ("pageable-copy", "blocking-copy"),
    "tiny_batch": ("launch-bound", "small-kernels"),
    "timer_sync": ("host-sync",),
    "cache_flush": ("alloc-churn",),
    "mixed_loader_item": ("input-starved",),       # host-sync may appear below it
}
HEALTHY = {
    "healthy_big": ("gpu-bound", "no-bottleneck-found"),
    "healthy_loader": ("gpu-bound", "no-bottleneck-found"),
}
CAUSE_RE = re.compile(r"^#\s*CAUSE((?:\s+[A-Za-z0-9_]+)+)\s*$")
DONE_RE = re.compile(r"^(\S+):\s+done\s+(\d+)\s*$")
FAIL_RE = re.compile(r"^(\S+):\s+failed\b")


def cause_lines(path):
    """mode -> list of line numbers of its CAUSE comments (real comments only)."""
    causes = {}
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                m = CAUSE_RE.match(tok.string)
                if m:
                    for mode in m.group(1).split():
                        causes.setdefault(mode, []).append(tok.start[0])
    except (OSError, tokenize.TokenError, SyntaxError) as e:
        print(f"warning: cannot read CAUSE markers from {path}: {e}", file=sys.stderr)
    return causes


def read_results(path):
    """mode -> done N (int) or 'failed'; the last line of a mode wins."""
    results = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                m = DONE_RE.match(line)
                if m:
                    results[m.group(1)] = int(m.group(2))
                    continue
                m = FAIL_RE.match(line)
                if m:
                    results[m.group(1)] = "failed"
    except OSError:
        pass
    return results


def read_report(out_dir, mode):
    """(report dict or None, status string)."""
    path = os.path.join(out_dir, mode + ".json")
    if not os.path.exists(path):
        return None, "missing"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None, "unreadable"
    if not isinstance(report, dict):
        return None, "unreadable"
    return report, "ok"


def diagnoses_of(report):
    diags = report.get("diagnoses")
    return [d for d in diags if isinstance(d, dict)] if isinstance(diags, list) else []


def verdict_diagnosis(report):
    verdict = report.get("verdict")
    for d in diagnoses_of(report):
        if d.get("id") == verdict:
            return d
    return None


def sites_of(diag):
    sites = diag.get("sites") if diag else None
    return [s for s in sites if isinstance(s, dict)] if isinstance(sites, list) else []


def site_label(site):
    frame = site.get("frame")
    if not frame:
        frame = f"{site.get('function', '?')} ({os.path.basename(str(site.get('file', '?')))}:{site.get('line', '?')})"
    return str(frame).replace("|", "\\|").replace("\n", " ")


def is_cause_site(site, lines):
    try:
        line = int(site.get("line"))
    except (TypeError, ValueError):
        return False
    return str(site.get("file") or "").endswith("unseen.py") and line in lines


def site_check(diag, lines):
    """('top' | 'top-3 (#k)' | 'no' | why-not, right?)"""
    if not lines:
        return "no CAUSE line", False
    sites = sites_of(diag)
    if not sites:
        return "no sites", False
    for k, site in enumerate(sites[:3], 1):
        if is_cause_site(site, lines):
            return ("top" if k == 1 else f"top-3 (#{k})"), True
    return "no", False


def predicted_speedup(diag):
    saving = diag.get("saving") if diag else None
    if not isinstance(saving, dict):
        return None
    try:
        fraction = float(saving.get("fraction"))
    except (TypeError, ValueError):
        return None
    if fraction >= 1.0:
        return float("inf")
    return 1.0 / (1.0 - fraction)


def measured_speedup(results, mode):
    """(value or None, text)."""
    slow, fast = results.get(mode), results.get(mode + "_fixed")
    if slow is None or fast is None:
        return None, "missing"
    if slow == "failed" or fast == "failed":
        return None, "failed"
    if slow == 0:
        return None, f"{fast}/0"
    return fast / slow, f"{fast / slow:.2f}x ({fast}/{slow})"


def fmt_x(value):
    if value is None:
        return "n/a"
    if value == float("inf"):
        return "inf"
    return f"{value:.2f}x"


def main():
    if len(sys.argv) != 2:
        print("usage: summarize_unseen.py OUT_DIR", file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    causes = cause_lines(UNSEEN_PY)
    results = read_results(os.path.join(out_dir, "unseen.txt"))

    for mode in PLANTED:
        if len(causes.get(mode, [])) != 1:
            print(f"warning: {mode} has {len(causes.get(mode, []))} CAUSE lines in unseen.py",
                  file=sys.stderr)

    print("| mode | verdict | verdict right? | top site of the verdict (frame) | site right? "
          "| predicted speed-up | measured twin speed-up | predicted/measured |")
    print("|---|---|---|---|---|---|---|---|")

    verdicts_right = sites_right = planted_seen = 0
    healthy_right = healthy_seen = 0

    for mode, accepted in PLANTED.items():
        lines = causes.get(mode, [])
        measured, measured_text = measured_speedup(results, mode)
        report, status = read_report(out_dir, mode)
        cause_text = f" (CAUSE line {lines[0]})" if lines else ""
        if report is None:
            print(f"| {mode} | {status} | - | - | -{cause_text} | - | {measured_text} | - |")
            continue
        planted_seen += 1
        verdict = str(report.get("verdict"))
        right = verdict in accepted
        verdicts_right += right
        diag = verdict_diagnosis(report)
        sites = sites_of(diag)
        top = site_label(sites[0]) if sites else "-"
        where, site_ok = site_check(diag, lines)
        sites_right += site_ok
        predicted = predicted_speedup(diag)
        ratio = "n/a"
        if predicted is not None and measured:
            ratio = "inf" if predicted == float("inf") else f"{predicted / measured:.2f}"
        note = ""
        if mode == "mixed_loader_item":
            others = [d.get("id") for d in diagnoses_of(report) if d.get("id") != verdict]
            if "host-sync" in others:
                note = " (+host-sync)"
        print(f"| {mode} | {verdict} | {'yes' if right else 'no'}{note} | {top} "
              f"| {where}{cause_text} | {fmt_x(predicted)} | {measured_text} | {ratio} |")

    for mode, accepted in HEALTHY.items():
        report, status = read_report(out_dir, mode)
        done = results.get(mode)
        done_text = f"done {done}" if isinstance(done, int) else (done or "missing")
        if report is None:
            print(f"| {mode} | {status} | - | - | - | - | ({done_text}) | - |")
            continue
        healthy_seen += 1
        verdict = str(report.get("verdict"))
        alarms = [str(d.get("id")) for d in diagnoses_of(report)
                  if d.get("severity") == "high" and d.get("id") != verdict]
        right = verdict in accepted and not alarms
        healthy_right += right
        why = "yes" if right else ("no: high " + ", ".join(alarms) if alarms else "no")
        print(f"| {mode} | {verdict} | {why} | - | - | - | ({done_text}) | - |")

    missing = len(PLANTED) - planted_seen + len(HEALTHY) - healthy_seen
    print()
    print(f"verdicts right: {verdicts_right}/{planted_seen} (planted modes with a report)")
    print(f"sites right: {sites_right}/{planted_seen}")
    print(f"healthy without false alarm: {healthy_right}/{healthy_seen}")
    if missing:
        print(f"modes without a report: {missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
