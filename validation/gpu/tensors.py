"""tensors.py MODE [--seconds S] - PyTorch jobs for the tensor-level memory view (issue 38).

  truth   run under `gputrace run` from the start: allocates a mix of tensors, gives some
          back (the caching allocator keeps their blocks), keeps 64 x 3 MiB alive, then
          prints the allocator's own figures and exits at once (os._exit: no teardown frees
          the tensors before gputrace's report is made):
          "truth allocated A reserved R cached C blocks_now N".
  cost    an allocation-heavy eager loop (a 16-layer 256-wide MLP at batch 8, every op a new
          output tensor) for S seconds after a warm-up; prints "cost steps_per_s X".
"""
import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["truth", "cost"])
parser.add_argument("--seconds", type=float, default=4.0)
args = parser.parse_args()
dev = torch.device("cuda")

if args.mode == "truth":
    torch.ones(1, device=dev)
    time.sleep(1.0)  # gputrace finds libc10_cuda.so on its next rescan, before the tensors
    kept = [torch.empty(3 << 20, dtype=torch.uint8, device=dev) for _ in range(64)]
    for size in (1 << 20, 5 << 20, 17 << 20, 40 << 20):
        dropped = [torch.empty(size, dtype=torch.uint8, device=dev) for _ in range(8)]
        del dropped
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    print(f"truth allocated {allocated} reserved {reserved} cached {reserved - allocated} "
          f"blocks_now {s.get('allocation.all.current', 0)} blocks_ever {s.get('allocation.all.allocated', 0)}", flush=True)
    os._exit(0)

model = torch.nn.Sequential(*[m for _ in range(16) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]).to(dev)
x = torch.randn(8, 256, device=dev)
for _ in range(50):
    model(x).sum().backward()
torch.cuda.synchronize()
steps, end = 0, time.perf_counter() + args.seconds
while time.perf_counter() < end:
    model(x).sum().backward()
    steps += 1
torch.cuda.synchronize()
print(f"cost steps_per_s {steps / args.seconds:.1f} steps {steps}", flush=True)
