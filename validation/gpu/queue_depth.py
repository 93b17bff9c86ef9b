"""How deep a stream's queue is before a launch blocks, and whether an exiting process pays
for the work it left queued (issue 55: the fake GPU's queue is modelled on these figures).

A long `torch.cuda._sleep` kernel holds the stream; tiny `add_` kernels are then launched
behind it, each launch timed on the host. While the queue has room a launch returns in a
few microseconds; the first one that finds it full blocks until the sleeping kernel ends
(hundreds of milliseconds). Its index is the depth: the number of launches pending when
one blocks (the sleeping kernel not counted).

Usage: python3 queue_depth.py            (prints one JSON object)
"""
import json
import subprocess
import sys
import time

import torch

SLEEP_CYCLES = int(1.5e9)  # ~0.8 s on a ~1.9 GHz SM clock
MAX_LAUNCHES = 20000
BLOCKED_NS = 1_000_000  # a launch that took over 1 ms waited for the queue


def depth(stream: torch.cuda.Stream | None, launch) -> dict:
    """Launches behind a sleeping kernel until one blocks: its index and its wait."""
    ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
    with ctx:
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        blocked_at, waited_ns = None, 0
        for i in range(MAX_LAUNCHES):
            t0 = time.perf_counter_ns()
            launch()
            dt = time.perf_counter_ns() - t0
            if dt > BLOCKED_NS:
                blocked_at, waited_ns = i, dt
                break
        torch.cuda.synchronize()
    return {"pending_when_blocked": blocked_at, "blocked_ms": round(waited_ns / 1e6, 3)}


def exit_cost() -> dict:
    """A child queues ~0.8 s of GPU work and returns from main at once: how long until it is
    gone, against the same child that synchronizes first."""
    child = (
        "import torch,time,sys;x=torch.zeros(1,device='cuda');torch.cuda.synchronize();"
        "t=time.perf_counter();torch.cuda._sleep(%d);"
        "sys.argv[1]=='sync' and torch.cuda.synchronize();"
        "print(time.perf_counter()-t,flush=True)" % SLEEP_CYCLES
    )
    out = {}
    for mode in ("exit", "sync"):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", child, mode], capture_output=True, text=True, check=True)
        total = time.perf_counter() - t0
        out[mode] = {"wall_s": round(total, 3), "in_main_s": round(float(p.stdout.strip()), 3)}
    return out


def main() -> None:
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    runs = {
        "default_stream_add": [depth(None, lambda: x.add_(1)) for _ in range(3)],
        "side_stream_add": [depth(side, lambda: x.add_(1)) for _ in range(3)],
    }
    # One kernel spread over more arguments (a bigger launch record): does the depth count
    # launches or bytes of the push buffer?
    y = torch.zeros(1024, device="cuda")
    runs["default_stream_addcmul"] = [depth(None, lambda: y.addcmul_(y, y, value=0.5)) for _ in range(2)]
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "depth": runs, "exit": exit_cost()}, indent=1))


if __name__ == "__main__":
    main()
