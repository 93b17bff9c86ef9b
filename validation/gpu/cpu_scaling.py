#!/usr/bin/env python3
"""cpu_scaling.py [SECONDS] - how fast N busy processes each run, for N up to the CPUs.

The step model takes work moved to N loader workers to run at the speed it ran on the
training thread. Where cores share a physical core (SMT, or a VM's vCPUs that are
hyperthreads) or the clock drops with load, each worker is slower. This measures it: N
processes each run a pure-Python loop (like a Python decoder) and a numpy kernel (like an
augmentation) for SECONDS, and each reports iterations per second. Prints, per N, the mean
rate per process relative to N=1 (1.00 = perfect scaling).
"""
import multiprocessing as mp
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")     # one thread a process, as a loader worker
import numpy as np  # noqa: E402


def python_loop(seconds, out):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        acc = 0
        for k in range(10_000):
            acc += (k * 7) % 5
        n += 1
    out.put(n / seconds)


def numpy_kernel(seconds, out):
    rng = np.random.default_rng(0)
    img = rng.random((3, 144, 144), dtype=np.float32)
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        x = img[:, 8:136, 8:136] * 1.1
        x = (x[:, :-1, :] + x[:, 1:, :]) * 0.5
        np.clip(x, 0, 1, out=x)
        n += 1
    out.put(n / seconds)


def run(target, n, seconds):
    out = mp.Queue()
    procs = [mp.Process(target=target, args=(seconds, out)) for _ in range(n)]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates) / len(rates)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
    cpus = len(os.sched_getaffinity(0))
    counts = sorted({1, 2, 4, 6, 8, 10, 12, 14, cpus} & set(range(1, cpus + 1)))
    for name, target in (("python", python_loop), ("numpy", numpy_kernel)):
        base = None
        for n in counts:
            rate = run(target, n, seconds)
            base = base or rate
            print(f"{name} N={n:2d} per-process {rate / base:.2f} of N=1, total {n * rate / base:.2f}", flush=True)


if __name__ == "__main__":
    main()
