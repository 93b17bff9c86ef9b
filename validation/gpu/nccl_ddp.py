"""A DDP job of one rank (torchrun --nproc_per_node 1) whose collectives are counted in the job
itself, for gputrace's `nccl` section (issue 37). World size 1 still runs NCCL's collectives.

Every gradient bucket goes through a communication hook that counts it before calling the
default all-reduce; the loop also all-reduces a loss tensor every STEP_ALLREDUCE_EVERY steps
and calls dist.barrier() once at the end. The job prints what it issued:
  issued allreduce_hook N allreduce_explicit M barrier 1 steps S
Usage: torchrun --nproc_per_node 1 nccl_ddp.py [--seconds S]"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEP_ALLREDUCE_EVERY = 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    ddp = DDP(model, device_ids=[local], bucket_cap_mb=8)
    hooked = 0

    def counting_hook(state, bucket):
        nonlocal hooked
        hooked += 1
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, counting_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, 1024, device="cuda")
    explicit = steps = 0
    until = time.monotonic() + args.seconds
    while time.monotonic() < until:
        opt.zero_grad(set_to_none=True)
        loss = ddp(x).square().mean()
        loss.backward()
        opt.step()
        steps += 1
        if steps % STEP_ALLREDUCE_EVERY == 0:
            t = loss.detach().clone()
            dist.all_reduce(t)
            explicit += 1
            t.item()
    torch.cuda.synchronize()
    dist.barrier()
    print(f"issued allreduce_hook {hooked} allreduce_explicit {explicit} barrier 1 steps {steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
