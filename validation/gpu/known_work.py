"""PyTorch doing known amounts of CUDA work, one phase at a time, each behind a gate.

Protocol on stdin/stdout (driven by known_work.sh): before each phase the script warms the
phase up, prints `ready NAME`, waits for a line, does exactly the phase's work, prints
`done NAME` and waits for another line before doing anything else — so a tracer attached
between `ready` and `done` sees exactly the phase's calls.
"""
import sys

import torch

dev = "cuda"
y = torch.zeros(1024, device=dev)
a = torch.randn(1024, 1024, device=dev)
ab = a.to(torch.bfloat16)
h = torch.randn(1 << 20)  # 4 MiB pageable
hp = h.pin_memory()  # pinned before any tracer attaches
g = torch.randn(1 << 20, device=dev)


def adds(n):
    for _ in range(n):
        y.add_(1)


def matmul(x, n):
    for _ in range(n):
        x @ x


def triton_phase():
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(ptr + offs, tl.load(ptr + offs, mask=m) + 1, mask=m)

    def run(k):
        for _ in range(k):
            add_one[(1,)](y, y.numel(), BLOCK=1024)

    return run


def graph_phase():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        adds(3)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        adds(100)

    def run(k):
        for _ in range(k):
            graph.replay()

    return run


def pageable(n):
    for _ in range(n):
        h.cuda()


def pinned(n):
    for _ in range(n):
        hp.cuda(non_blocking=True)


def to_cpu(n):
    for _ in range(n):
        g.cpu()


def item(n):
    for _ in range(n):
        g[0].item()


PHASES = [
    ("add", lambda n: adds(n), 20000),
    ("matmul_fp32", lambda n: matmul(a, n), 2000),
    ("matmul_bf16", lambda n: matmul(ab, n), 2000),
    ("triton", None, 2000),
    ("graph_replay", None, 200),
    ("pageable_h2d", pageable, 500),
    ("pinned_h2d", pinned, 500),
    ("cpu_d2h", to_cpu, 500),
    ("item", item, 2000),
]

for name, fn, n in PHASES:
    try:
        if name == "triton":
            fn = triton_phase()
        elif name == "graph_replay":
            fn = graph_phase()
        fn(5)  # warm up: first-use allocations, compilation, cuBLAS handles
        torch.cuda.synchronize()
    except Exception as e:  # a phase that cannot run here is reported, not fatal
        print(f"skip {name} {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        continue
    print(f"ready {name} {n}", flush=True)
    sys.stdin.readline()
    fn(n)
    print(f"done {name}", flush=True)
    sys.stdin.readline()
    torch.cuda.synchronize()
print("finished", flush=True)
