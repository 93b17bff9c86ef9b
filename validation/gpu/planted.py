"""PyTorch jobs that each plant one bottleneck, or none. After warming up the script prints
`ready`, waits for a line on stdin, then runs its loop for --seconds.

  launch_bound  deep narrow MLP, batch 8, eager: thousands of tiny kernels per step
  pageable      each step copies a 64 MiB batch from pageable memory (no pin_memory)
  item          each step (~10 ms of GPU work) reads the loss with .item(), then does 5 ms
                of host work while the GPU has nothing queued
  alloc_churn   each step empties the cache and allocates fresh, differently sized buffers
  healthy_gemm  chains of 8192² bf16 matmuls: the GPU is the limiter
  healthy_train the same bf16 step on pinned, non-blocking input, loss read every 50 steps
"""
import argparse
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("mode")
p.add_argument("--seconds", type=float, default=7.0)
args = p.parse_args()
dev = "cuda"


def mlp(width, depth, dtype=torch.float32):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(dev, dtype)


if args.mode == "launch_bound":
    model = mlp(64, 40)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64, device=dev)

    def step(i):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
elif args.mode == "pageable":
    model = mlp(1024, 4)
    host = torch.randn(16384, 1024)  # 64 MiB, pageable

    def step(i):
        xb = host.to(dev)
        model(xb[:512]).sum()
elif args.mode == "item":
    # ~10 ms of GPU work per step, then .item() and 5 ms of host work (logging, data prep)
    # during which the GPU has nothing queued.
    model = mlp(8192, 4, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 8192, device=dev, dtype=torch.bfloat16)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        v = loss.item()
        t = time.perf_counter() + 0.005
        while time.perf_counter() < t:
            pass
        return v
elif args.mode == "alloc_churn":
    def step(i):
        torch.cuda.empty_cache()
        bufs = [torch.empty((1 + (i + k) % 7) << 22, device=dev) for k in range(8)]
        for b in bufs:
            b.fill_(1)
        del bufs
elif args.mode == "healthy_gemm":
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def step(i):
        b = a
        for _ in range(8):
            b = b @ a
        torch.cuda.synchronize()
elif args.mode == "healthy_train":
    # The same ~10 ms step as `item`, fed from pinned memory, loss read every 50 steps.
    model = mlp(8192, 4, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    host = torch.randn(4096, 8192).to(torch.bfloat16).pin_memory()

    def step(i):
        xb = host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = model(xb).float().square().mean()
        loss.backward()
        opt.step()
        if i % 50 == 0:
            loss.item()
else:
    sys.exit(f"unknown mode {args.mode}")

for i in range(5):
    step(i)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
end = time.perf_counter() + args.seconds
steps = 0
while time.perf_counter() < end:
    step(steps)
    steps += 1
torch.cuda.synchronize()
print(f"done {steps}", flush=True)
