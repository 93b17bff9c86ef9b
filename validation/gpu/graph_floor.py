#!/usr/bin/env python3
"""graph_floor.py [SECONDS] - the GPU time one small op takes launched alone and replayed
back to back in a CUDA graph (issue 32: the GPU floor that the launch fix leaves).

A launch-bound job launches its kernels one at a time with the GPU idle between them; NVML
counts each kernel's whole time on the device. Replayed in a graph, the same kernels run
back to back. This measures both for ops of a few sizes, with no tracer:

- eager: one op, then the host busy-waits GAP_US so that the GPU is idle before the next,
  for SECONDS; nvidia-smi samples NVML's utilization every 100 ms meanwhile. Busy time per
  op = utilization x SECONDS / ops.
- graph: OPS ops captured once, replayed for SECONDS with the queue kept full. Time per op =
  elapsed (CUDA events) / ops replayed.

Prints one line per op: its eager busy time per op, its graph time per op, and their ratio.
"""
import statistics
import subprocess
import sys
import threading
import time

import torch

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
GAP_US = 40.0
OPS = 200
DEV = torch.device("cuda")


def ops():
    """name -> a function that launches one op (its tensors made once)."""
    made = {}
    a1k = torch.zeros(1024, device=DEV)
    made["add 1k floats"] = lambda: a1k.add_(1.0)
    a1m = torch.zeros(1 << 20, device=DEV)
    made["add 1M floats"] = lambda: a1m.add_(1.0)
    x8, w64, y8 = (torch.randn(8, 64, device=DEV), torch.randn(64, 64, device=DEV), torch.empty(8, 64, device=DEV))
    made["mm 8x64x64"] = lambda: torch.mm(x8, w64, out=y8)
    x64, w256, y64 = (torch.randn(64, 256, device=DEV), torch.randn(256, 1024, device=DEV), torch.empty(64, 1024, device=DEV))
    made["mm 64x256x1024"] = lambda: torch.mm(x64, w256, out=y64)
    ln = torch.nn.LayerNorm(256, device=DEV)
    xl = torch.randn(64, 256, device=DEV)
    made["layer_norm 64x256"] = lambda: ln(xl)
    return made


class Sampler:
    """nvidia-smi's utilization.gpu every 100 ms, with host timestamps."""

    def __init__(self):
        self.samples = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100", "-i", "0"],
            stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append((time.monotonic(), float(line.strip())))
            except ValueError:
                pass

    def mean(self, start, end):
        inside = [u for t, u in self.samples if start <= t <= end]
        return statistics.mean(inside) if inside else float("nan")

    def close(self):
        self.proc.terminate()


def eager(op, sampler):
    for _ in range(50):
        op()
    torch.cuda.synchronize()
    gap = GAP_US / 1e6
    start = time.monotonic()
    count = 0
    while time.monotonic() - start < SECONDS:
        op()
        count += 1
        until = time.perf_counter() + gap
        while time.perf_counter() < until:
            pass
    torch.cuda.synchronize()
    end = time.monotonic()
    # NVML's own sample period reaches back up to a second: leave the first and last out.
    util = sampler.mean(start + 1.0, end - 0.2) / 100.0
    return util * (end - start) / count, count / (end - start)


def graph(op):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(OPS):
            op()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replays = 0
    begin.record()
    started = time.monotonic()
    while time.monotonic() - started < SECONDS:
        for _ in range(20):
            g.replay()
        replays += 20
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3 / (replays * OPS)


def main():
    sampler = Sampler()
    time.sleep(1.0)
    print(f"# graph_floor.py {SECONDS} s a phase, {GAP_US:.0f} us between eager ops, {OPS} ops a graph; {torch.cuda.get_device_name()}")
    print("op | eager busy per op (us) | eager ops/s | graph per op (us) | graph / eager")
    try:
        for name, op in ops().items():
            busy, rate = eager(op, sampler)
            replayed = graph(op)
            print(f"{name} | {busy * 1e6:.2f} | {rate:.0f} | {replayed * 1e6:.2f} | {replayed / busy:.2f}", flush=True)
    finally:
        sampler.close()


if __name__ == "__main__":
    main()
