#!/usr/bin/env python3
"""
competing.py - jobs with two causes in one step, and a twin for EACH competing fix

    python3 competing.py JOB_VARIANT [--seconds S]

Same protocol as unseen.py (warm up, print "ready", wait for a line on stdin, train S
seconds, print "done N"), so unseen.sh runs it (UNSEEN_JOB=competing.py).

Jobs (docs/validation.md, "The step model"):
  sync_book   4-layer TransformerEncoder (d 512, batch 32 x 128 tokens), AdamW; every step
              loss.item() and then ~2 ms of Python bookkeeping (H200).
  mlp_item    32-layer 256-wide MLP at batch 16, loss.item() every step: hundreds of tiny
              kernels a step.
Variants (each job has all that apply):
  planted     as described
  nosync      the loss summed on the GPU and read every 100 steps (bookkeeping kept)
  nobook      the bookkeeping dropped (the per-step .item() kept)      [sync_book]
  lognth      "log every N steps": the loss summed on the GPU, read and the bookkeeping done
              every 100 steps (host-sync's ranked form, sync-and-bookkeeping)
  graph       forward, backward and a capturable AdamW step captured once as a CUDA graph
              and replayed; .item() and bookkeeping kept
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEVICE = "cuda"
WARMUP_SECONDS = 1.5


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Bookkeeper:
    """~2 ms of plain Python a step on the H200 host: moving averages of named gauges."""

    def __init__(self, gauges=8000):
        self.names = [f"g/{i:05d}" for i in range(gauges)]
        self.ema = dict.fromkeys(self.names, 0.0)

    def record(self, value):
        for i, name in enumerate(self.names):
            self.ema[name] = 0.95 * self.ema[name] + 0.05 * value * (1.0 + 1e-4 * i)


def build(job):
    torch.manual_seed(0)
    if job == "sync_book":
        layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        model = nn.Sequential(nn.TransformerEncoder(layer, 4), nn.Linear(512, 512)).to(DEVICE)
        x = torch.randn(32, 128, 512, device=DEVICE)
        y = torch.randn(32, 128, 512, device=DEVICE)
    elif job == "mlp_item":
        layers = []
        for _ in range(32):
            layers += [nn.Linear(256, 256), nn.ReLU()]
        model = nn.Sequential(*layers).to(DEVICE)
        x = torch.randn(16, 256, device=DEVICE)
        y = torch.randn(16, 256, device=DEVICE)
    else:
        raise SystemExit(f"unknown job {job}")
    return model, x, y


class Trainer:
    def __init__(self, job, variant):
        self.job, self.variant = job, variant
        self.model, self.x, self.y = build(job)
        graph = variant == "graph"
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, capturable=graph)
        self.book = Bookkeeper() if job == "sync_book" and variant != "nobook" else None
        self.loss_sum = torch.zeros((), device=DEVICE)
        self.step = 0
        self.graph = None
        if graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self._eager()
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(self.graph):
                self.static_loss = F.mse_loss(self.model(self.x), self.y)
                self.static_loss.backward()
                self.opt.step()

    def _eager(self):
        self.opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss

    def one_step(self):
        if self.graph is not None:
            self.graph.replay()
            loss = self.static_loss
        else:
            loss = self._eager()
        if self.variant in ("nosync", "lognth"):
            self.loss_sum += loss.detach()
            value = None
            if self.step % 100 == 99:
                value = self.loss_sum.item() / 100
                self.loss_sum.zero_()
        else:
            value = loss.item()
        if self.book is not None and (self.variant != "lognth" or value is not None):
            self.book.record(value if value is not None else 0.0)
        self.step += 1

    def train(self, seconds):
        n = 0
        deadline = time.perf_counter() + seconds
        while n == 0 or time.perf_counter() < deadline:
            self.one_step()
            n += 1
        return n


VARIANTS = {"sync_book": ("planted", "nosync", "nobook", "lognth", "graph"), "mlp_item": ("planted", "nosync", "lognth", "graph")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", help=" | ".join(f"{j}_{v}" for j, vs in VARIANTS.items() for v in vs))
    p.add_argument("--seconds", type=float, default=7.0)
    a = p.parse_args()
    job, _, variant = a.mode.rpartition("_")
    if job not in VARIANTS or variant not in VARIANTS[job]:
        raise SystemExit(f"unknown mode {a.mode}")
    torch.backends.cuda.matmul.allow_tf32 = True
    t = Trainer(job, variant)
    t.train(WARMUP_SECONDS)
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    n = t.train(a.seconds)
    torch.cuda.synchronize()
    log(f"{a.mode}: {n} steps in {time.perf_counter() - t0:.2f} s")
    print(f"done {n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
