"""PyTorch jobs that each plant one bottleneck, or none. After warming up the script prints
`ready`, waits for a line on stdin, then runs its loop for --seconds.

  launch_bound  deep narrow MLP, batch 8, eager: thousands of tiny kernels per step
  pageable      each step copies a 64 MiB batch from pageable memory (no pin_memory)
  item          each step (~10 ms of GPU work) reads the loss with .item(), then does 5 ms
                of host work while the GPU has nothing queued
  alloc_churn   each step empties the cache and allocates fresh, differently sized buffers
  healthy_gemm  chains of 8192² bf16 matmuls: the GPU is the limiter
  healthy_train the same bf16 step on pinned, non-blocking input, loss read every 50 steps
  loader_disk   a DataLoader with 1 worker reading 4 MiB samples from disk with O_DIRECT
  loader_cpu    a DataLoader with 2 workers doing heavy CPU work per sample
  loader_inline the loader_cpu dataset with num_workers=0: each sample is decoded on the
                training thread itself
  paused        the healthy GEMM loop, which sleeps 1.7 s (time.sleep) once in the window:
                a pause, not a bottleneck
  sleepy        a GEMM step, then time.sleep(5 ms) every step: the loop's own sleep
  graph_tiny    the launch-bound MLP's forward and backward captured in a CUDA graph and
                replayed: the launches are cheap, the kernels still tiny
  launch_bound_graph  launch_bound's whole step (zero_grad, forward, backward, SGD step)
                captured once as a CUDA graph and replayed: launch-bound's fix, the same
                work as launch_bound (graph_tiny has no optimizer step)
  contention    the launch-bound loop pinned to one core shared with 3 busy processes
  checkpoint    a ~2.5 ms bf16 training step that saves model + AdamW state (~384 MiB)
                with torch.save every 20 steps, in the loop

Fixed twins (the same job with the diagnosed fix applied; their steps/s, measured, stand
beside the planted job's predicted steps/s after the fix in docs/validation.md):
  item_fixed    item, reading the loss every 50 steps instead of every step
  item_nohost   item without its 5 ms of host work (the .item() stays): host work's fix,
                the competing one
  sleepy_fixed  sleepy without the sleep (the synchronize stays)
  pageable_fixed  pageable, its batch in pinned memory, copied with non_blocking=True
  alloc_churn_fixed  alloc_churn without emptying the cache (the caching allocator reuses)
  loader_inline_fixed  loader_inline with num_workers=$TWIN_WORKERS (default 8; persistent,
                prefetching): planted.sh sets it to the workers the report recommends
  checkpoint_fixed  checkpoint without the in-loop saves (the limit of an asynchronous,
                rarer checkpoint)
                (planted.sh starts the busy processes and pins the job)
  idle          holds a CUDA context and 1 GiB of device memory and sleeps (an idle GPU)
  idle20        the same with 20 GiB
  loader_cpu4   loader_cpu with 4 workers forked after CUDA was initialised (sweep: the
                workers inherit the driver's mappings, not a context)

Memory (issue 21):
  leak          a bf16 training step (batch 32) that keeps every step's output on the GPU
                for metrics later (preds.append(out)): 512 KiB more held every step
  leak_fixed    leak folding the output into a running metric instead
  fragmentation all but 12 GiB of the GPU held, then each step allocates a buffer that
                grows from 1 to 5 GiB a quarter at a time and starts over, living until the
                next step: no cached block fits the next size, so cudaMalloc fails and the
                allocator frees its cache and retries (the job prints torch's own count of
                those retries)
  fragmentation_fixed  fragmentation with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  oom           leak_fixed, which at its 300th traced step asks for 200 GiB once and catches
                the OutOfMemoryError
"""
import argparse
import mmap
import os
import sys
import time

if "fragmentation_fixed" in sys.argv:
    # Read by the caching allocator when it starts, at the first allocation.
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

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


if args.mode in ("idle", "idle20"):
    held = torch.empty((20 if args.mode == "idle20" else 1) << 30, dtype=torch.uint8, device=dev)

    def step(i):
        time.sleep(0.1)
elif args.mode == "launch_bound":
    model = mlp(64, 40)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64, device=dev)

    def step(i):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
elif args.mode == "launch_bound_graph":
    model = mlp(64, 40)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64, device=dev)

    def whole_step():
        model(x).square().mean().backward()
        opt.step()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # autograd and optimizer state made off the capture
            opt.zero_grad(set_to_none=True)
            whole_step()
    torch.cuda.current_stream().wait_stream(s)
    # Gradients set to None before capture: the captured backward writes them afresh on every
    # replay (PyTorch's whole-network capture recipe), which is what zero_grad did.
    opt.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        whole_step()

    def step(i):
        g.replay()
elif args.mode == "graph_tiny":
    model = mlp(64, 40)
    x = torch.randn(8, 64, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x).square().mean().backward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x).square().mean().backward()

    def step(i):
        g.replay()
elif args.mode in ("pageable", "pageable_fixed"):
    model = mlp(1024, 4)
    host = torch.randn(16384, 1024)  # 64 MiB, pageable
    if args.mode == "pageable_fixed":
        host = host.pin_memory()

    def step(i):
        xb = host.to(dev, non_blocking=args.mode == "pageable_fixed")
        model(xb[:512]).sum()
elif args.mode in ("item", "item_fixed", "item_nohost"):
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
        if args.mode != "item_fixed" or i % 50 == 0:
            loss.item()
        if args.mode == "item_nohost":
            return
        t = time.perf_counter() + 0.005
        while time.perf_counter() < t:
            pass
elif args.mode in ("alloc_churn", "alloc_churn_fixed"):
    def step(i):
        if args.mode == "alloc_churn":
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
elif args.mode in ("paused", "sleepy", "sleepy_fixed"):
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    started = [None]

    def step(i):
        b = a
        for _ in range(4):
            b = b @ a
        if args.mode == "sleepy":
            torch.cuda.synchronize()
            time.sleep(0.005)
        elif args.mode == "sleepy_fixed":
            torch.cuda.synchronize()
        else:
            if started[0] is None:
                started[0] = time.perf_counter()
            # One pause of 1.7 s, 2 s into the loop.
            if started[0] > 0 and time.perf_counter() - started[0] > 2.0:
                torch.cuda.synchronize()
                time.sleep(1.7)
                started[0] = -1.0
elif args.mode in ("checkpoint", "checkpoint_fixed"):
    model = mlp(4096, 4, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    host = torch.randn(4096, 4096).to(torch.bfloat16).pin_memory()

    def save_checkpoint(i):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": i}, "/tmp/gputrace-ckpt.pt")

    def step(i):
        xb = host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = model(xb).float().square().mean()
        loss.backward()
        opt.step()
        if args.mode == "checkpoint" and i % 20 == 19:
            save_checkpoint(i)
elif args.mode in ("loader_disk", "loader_cpu", "loader_cpu4", "loader_inline", "loader_inline_fixed"):
    from torch.utils.data import DataLoader, Dataset

    SAMPLE = 4 << 20
    data_dir = "/tmp/gputrace-loader-data"

    class DiskSamples(Dataset):
        """Each sample is read from disk with O_DIRECT: no page cache, every byte a block read."""

        def __init__(self, n):
            os.makedirs(data_dir, exist_ok=True)
            self.paths = []
            for k in range(n):
                path = f"{data_dir}/{k}.bin"
                if not os.path.exists(path) or os.path.getsize(path) != SAMPLE:
                    with open(path, "wb") as f:
                        f.write(os.urandom(SAMPLE))
                self.paths.append(path)
            os.sync()

        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            buf = mmap.mmap(-1, SAMPLE)
            fd = os.open(self.paths[i % len(self.paths)], os.O_RDONLY | os.O_DIRECT)
            try:
                os.readv(fd, [buf])
            finally:
                os.close(fd)
            return torch.frombuffer(buf, dtype=torch.uint8)[:4096].float()

    class CpuSamples(Dataset):
        """Each sample costs ~20 ms of CPU (an unvectorised "decode")."""

        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            acc = 0.0
            for k in range(200_000):
                acc += (k * i) % 7
            return torch.full((4096,), acc)

    ds = DiskSamples(64) if args.mode == "loader_disk" else CpuSamples()
    twin_workers = int(os.environ.get("TWIN_WORKERS", "8"))
    workers = {"loader_disk": 1, "loader_cpu": 2, "loader_cpu4": 4, "loader_inline": 0, "loader_inline_fixed": twin_workers}[args.mode]
    extra = {"prefetch_factor": 2, "persistent_workers": True} if workers else {}
    if args.mode == "loader_cpu4":
        # As most training scripts do: CUDA is initialised (the model moved to the GPU) before
        # the loader forks its workers, which inherit the driver's mappings.
        torch.zeros(1, device=dev)
    it = iter(DataLoader(ds, batch_size=8, num_workers=workers, **extra))
    model = mlp(4096, 4)

    def step(i):
        xb = next(it).to(dev)
        model(xb).sum()
elif args.mode == "contention":
    model = mlp(256, 8)
    x = torch.randn(64, 256, device=dev)

    def step(i):
        model(x).sum()
elif args.mode in ("leak", "leak_fixed", "oom"):
    model = mlp(8192, 4, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    host = torch.randn(32, 8192).to(torch.bfloat16).pin_memory()
    preds = []
    metric = torch.zeros((), device=dev)

    def step(i):
        xb = host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        out.float().square().mean().backward()
        opt.step()
        if args.mode == "leak":
            preds.append(out)  # every step's output kept on the GPU, for metrics later
        else:
            metric.add_(out.detach().float().mean())
        if args.mode == "oom" and i == 300:
            try:
                torch.empty(200 << 30, dtype=torch.uint8, device=dev)  # more than the GPU has
            except torch.OutOfMemoryError:
                print("out of memory, caught", file=sys.stderr, flush=True)
elif args.mode in ("fragmentation", "fragmentation_fixed"):
    free, _ = torch.cuda.mem_get_info()
    ballast = torch.empty(free - (12 << 30), dtype=torch.uint8, device=dev)
    kept = [None]

    def step(i):
        # A buffer that grows from 1 to 5 GiB, a quarter each step, and starts over (batches
        # bucketed by length, longest last), living until the next step: no cached block
        # fits the next size, and the cache holds the memory a new block needs.
        quarters = 4 + i % 17
        a = torch.empty(quarters << 28, dtype=torch.uint8, device=dev)
        a.fill_(1)
        kept[0] = a
else:
    sys.exit(f"unknown mode {args.mode}")

for i in range(5):
    step(i)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
allocated_at_go = torch.cuda.memory_allocated()
end = time.perf_counter() + args.seconds
steps = 0
while time.perf_counter() < end:
    step(steps)
    steps += 1
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
# The tensor-level truth for gputrace's memory.tensors (issue 38): bytes in tensors added since
# the trace began, per step; and cached (reserved but in no tensor) at the end.
added = torch.cuda.memory_allocated() - allocated_at_go
cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
print(f"done {steps} alloc_retries {stats.get('num_alloc_retries', 0)} ooms {stats.get('num_ooms', 0)} "
      f"allocated_added {added} per_step {added / max(steps, 1):.0f} cached {cached}", flush=True)
