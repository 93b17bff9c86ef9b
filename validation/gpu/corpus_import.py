#!/usr/bin/env python3
"""
corpus_import.py - take a corpus.sh run into the repository's corpus (docs/accuracy.md)

    python3 corpus_import.py RUN_DIR SET [--gputrace BIN]

RUN_DIR is what corpus.sh wrote (SEED.json and SEED.gtr per seed); SET is `tuning` or
`held_back`. Each seed whose run finished is compressed (`zstd -19 --long=27`) into
validation/corpus/jobs/SEED.gtr.zst beside its twins' file jobs/SEED.json, and listed in
validation/corpus/seeds.json under SET. Refused: a seed already listed in the other set, a
compressed recording over 2 MB, a corpus over 60 MB in all, a job one of whose twins failed
(its fastest twin is unknown). With --gputrace, each compressed
file is checked to report as its plain recording did (the same verdict and launch count).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.normpath(os.path.join(HERE, "..", "corpus"))
MAX_FILE = 2 << 20
MAX_ALL = 60 << 20


def corpus_bytes():
    jobs = os.path.join(CORPUS, "jobs")
    return sum(os.path.getsize(os.path.join(jobs, f)) for f in os.listdir(jobs)) if os.path.isdir(jobs) else 0


def report(gputrace, path):
    out = subprocess.run([gputrace, "report", path, "--json"], capture_output=True, check=True)
    r = json.loads(out.stdout)
    return r["verdict"], r["cuda"]["launches"]["kernels"], r["cuda"]["launches"]["graphs"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("set", choices=("tuning", "held_back"))
    p.add_argument("--gputrace")
    a = p.parse_args()
    seeds_path = os.path.join(CORPUS, "seeds.json")
    seeds = json.load(open(seeds_path)) if os.path.exists(seeds_path) else {"tuning": [], "held_back": []}
    other = "held_back" if a.set == "tuning" else "tuning"
    os.makedirs(os.path.join(CORPUS, "jobs"), exist_ok=True)
    found = sorted(int(f[:-5]) for f in os.listdir(a.run_dir) if f.endswith(".json") and f[:-5].isdigit())
    # A staged file of an interrupted import counts toward nothing.
    for f in os.listdir(os.path.join(CORPUS, "jobs")):
        if f.endswith(".new"):
            os.unlink(os.path.join(CORPUS, "jobs", f))
    for seed in found:
        twins, gtr = os.path.join(a.run_dir, f"{seed}.json"), os.path.join(a.run_dir, f"{seed}.gtr")
        if seed in seeds[other]:
            print(f"{seed}: refused: listed in {other}")
            continue
        if not os.path.exists(gtr):
            print(f"{seed}: skipped: no recording")
            continue
        failed = json.load(open(twins)).get("failed_twins") or {}
        if failed:
            # Without every twin the fastest is unknown: the job cannot be judged.
            print(f"{seed}: refused: twins failed ({', '.join(sorted(failed))})")
            continue
        dest = os.path.join(CORPUS, "jobs", f"{seed}.gtr.zst")
        # Compressed beside, checked, then renamed: a refusal leaves a listed job as it was.
        staged = dest + ".new"
        subprocess.run(["zstd", "-q", "-f", "-19", "--long=27", gtr, "-o", staged], check=True)
        size = os.path.getsize(staged)
        if size > MAX_FILE or corpus_bytes() > MAX_ALL:
            os.unlink(staged)
            print(f"{seed}: refused: {size} bytes compressed (at most {MAX_FILE} a file, {MAX_ALL} in all)")
            continue
        if a.gputrace and report(a.gputrace, staged) != report(a.gputrace, gtr):
            os.unlink(staged)
            print(f"{seed}: refused: the compressed file reports otherwise than the plain one")
            continue
        os.replace(staged, dest)
        shutil.copyfile(twins, os.path.join(CORPUS, "jobs", f"{seed}.json"))
        if seed not in seeds[a.set]:
            seeds[a.set].append(seed)
        print(f"{seed}: {os.path.getsize(gtr)} -> {size} bytes")
    for s in ("tuning", "held_back"):
        seeds[s] = sorted(set(seeds[s]))
    with open(seeds_path, "w") as f:
        json.dump(seeds, f, indent=1)
        f.write("\n")
    print(f"corpus: {corpus_bytes()} bytes in {len(seeds['tuning'])} tuning and {len(seeds['held_back'])} held-back jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
