"""A PyTorch loop whose steps/s is measured in phases, for the overhead benchmark
(overhead.sh). After warming up it prints `ready PID`; then each stdin line is a command:

  measure NAME SECONDS   run steps for SECONDS, print `NAME STEPS_PER_S STEPS`
  profile NAME SECONDS   the same under torch.profiler (CPU + CUDA activities): the peer
  quit

Workloads:
  eager   launch-bound: a deep narrow MLP, batch 8, eager forward/backward/step
          (~250 kernel launches per step, host-bound)
  bf16    GPU-bound: bf16 MLP of 8192² layers, batch 4096, forward/backward/step
  graph   the eager MLP's forward and backward captured once in a CUDA graph, replayed
  item    one `x.item()` on a 1-element tensor per step: a device-to-host copy and a
          stream synchronize, the pattern whose probe cost issue 20 measured
  tiny    100 `y.add_(1)` per step on a 1-element tensor: the fastest launch loop PyTorch
          makes (~150,000 launches a second), for the overhead budget (budget.sh)
"""
import os
import sys
import time

import torch

mode = sys.argv[1]
dev = "cuda"


def mlp(width, depth, dtype=torch.float32):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(dev, dtype)


if mode in ("eager", "graph"):
    model = mlp(64, 40)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64, device=dev)
    if mode == "eager":
        def step():
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
    else:
        # Capture forward + backward (grads accumulate into static .grad buffers).
        for _ in range(3):
            model(x).square().mean().backward()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x).square().mean().backward()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            model(x).square().mean().backward()

        def step():
            g.replay()
elif mode == "bf16":
    model = mlp(8192, 4, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 8192, device=dev, dtype=torch.bfloat16)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()
        opt.step()
elif mode == "tiny":
    y = torch.zeros(1, device=dev)

    def step():
        for _ in range(100):
            y.add_(1)
elif mode == "item":
    x = torch.ones(1, device=dev)

    def step():
        x.item()
else:
    raise SystemExit(f"unknown mode {mode}")


def run_for(seconds):
    # Whole steps, synchronized at the end: steps/s includes the GPU's share. The main
    # thread's CPU time per step is kept too: a uprobe's trap is charged to the thread that
    # hit it, and CPU time leaves out the waits for a CPU (other tenants, host steal) that
    # make wall-clock rates of a VM vary by tens of percent from phase to phase.
    n = 0
    t0 = time.perf_counter()
    c0 = time.thread_time()
    while True:
        for _ in range(10):
            step()
        n += 10
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        if t >= seconds:
            return n / t, n, (time.thread_time() - c0) / n * 1e6


for _ in range(50):
    step()
torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    parts = line.split()
    if not parts or parts[0] == "quit":
        break
    name, seconds = parts[1], float(parts[2])
    if parts[0] == "profile":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            rate, n, cpu_us = run_for(seconds)
    else:
        rate, n, cpu_us = run_for(seconds)
    print(f"{name} {rate:.2f} {n} {cpu_us:.3f}", flush=True)
