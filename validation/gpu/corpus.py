#!/usr/bin/env python3
"""
corpus.py - generated jobs for the accuracy corpus (issue 58; docs/accuracy.md)

    python3 corpus.py draw SEED
        print the job SEED draws, as JSON (no torch needed)
    python3 corpus.py run SEED --out DIR [--seconds S] [--traced-seconds T]
        run the job and its twins in one process:
          1. build the planted job, warm it up, print "ready", wait for a line on stdin
             (corpus.sh attaches `gputrace record` meanwhile);
          2. run the planted job T s (traced), print "traced N", wait for a line on stdin
             (corpus.sh waits for the recorder to be gone);
          3. untraced, S s each: planted, every twin, all-fixed, planted again;
             write DIR/SEED.json and print "done".

A seed draws a job mixing zero to three causes over a model of drawn width, depth and batch:

  sync        loss.item() every step; optionally host bookkeeping that consumes the value,
              on the CPU (a spin) or asleep (time.sleep), for book_ms
  loader      a DataLoader (batch_size=None) with 0..2 workers whose __getitem__ does
              transform_ms of numpy work and copies a cached batch
  pageable    copy_mb copied host-to-device every step from pageable memory, blocking
  churn       torch.cuda.empty_cache() and a fresh buffer of a changing size every step
  contention  the training thread pinned to one core that CORPUS_HOGS' busy processes share
  checkpoint  torch.save of the model and optimizer every K steps, in the loop
  prep        (generator 3) each batch made on the training thread by a function of the
              script's own, through torch's CPU ops (per-sample flips, scales and noise of
              CPU tensors, then torch.stack), for prep_ms; no DataLoader. Seeds of the prep
              family (900-999 tuning, 3000-3999 held back) always draw it.

and whether the step is eager or already replayed as a CUDA graph. Jobs with no cause are
drawn large (the GPU should be the limit: the healthy ones).

Twins, each the planted job with one fix (the names the scorer maps to diagnoses,
xtask/src/score.rs):

  lognth      loss read and bookkeeping done every 100 steps ("log every N steps")
  nobook      the bookkeeping dropped, the per-step .item() kept
  workers     the loader with 8 persistent workers, prefetching (for prep: the same function
              run by 8 persistent workers of a DataLoader over an IterableDataset, pinned)
  pinned      the copy from pinned memory, non_blocking=True
  nochurn     no empty_cache, one buffer reused
  alone       the busy processes stopped (SIGSTOP), the pinning kept
  nockpt      no checkpoint in the loop (the limit of an asynchronous, rarer one)
  graph       forward, backward and a capturable AdamW step replayed as one CUDA graph
  allfixed    every planted cause fixed (sync by lognth) and, where eager, the graph

Environment: CORPUS_HOGS (pids of busy processes pinned to CORPUS_CORE, stopped and continued
by this script), CORPUS_CORE [2], CORPUS_CKPT_DIR [/tmp], CORPUS_RECORD_FIXED [unset] (1: after
the twins, the all-fixed twin runs T s more between "fixed-ready" and "fixed-traced N", for a
recording of it).
"""
import argparse
import json
import os
import random
import signal
import sys
import time

CAUSES = ("sync", "loader", "pageable", "churn", "contention", "checkpoint")
# Generator 3 adds `prep`; the draws of generators 1 and 2 are kept as they were.
CAUSES_3 = CAUSES + ("prep",)
LOG_EVERY = 100
# Bumped when the same seed would run another job (SEED.json's "generator").
GENERATOR = 3


def prep_family(seed):
    """Seeds whose jobs always make their batches through torch on the training thread."""
    return 900 <= seed < 1000 or 3000 <= seed < 4000
TWIN_WORKERS = 8


def draw(seed, generator=GENERATOR):
    """The job of SEED: plain data, so `draw` needs no torch and the scorer can read it."""
    r = random.Random(seed)
    n_causes = r.choice((0, 1, 1, 2, 2, 2, 3))
    causes = sorted(r.sample(CAUSES if generator < 3 else CAUSES_3, n_causes))
    if generator >= 3 and prep_family(seed) and "prep" not in causes:
        causes = sorted(([c for c in causes if c != "loader"] + ["prep"])[-3:])
    healthy = not causes
    kind = r.choice(("mlp", "mlp", "transformer", "conv"))
    if kind == "mlp":
        model = {"kind": kind, "depth": r.choice((4, 8, 16, 32)), "width": r.choice((256, 512, 1024, 2048)),
                 "batch": r.choice((16, 64, 256, 1024))}
        if healthy:
            model.update(depth=r.choice((6, 8)), width=4096, batch=r.choice((4096, 8192)))
    elif kind == "transformer":
        model = {"kind": kind, "depth": r.choice((1, 2, 4)), "width": r.choice((256, 512)),
                 "batch": r.choice((4, 16, 32)), "seq": 128}
        if healthy:
            model.update(depth=6, width=1024, batch=64, seq=256)
    else:
        model = {"kind": kind, "depth": r.choice((2, 4, 8)), "width": r.choice((32, 64, 128)),
                 "batch": r.choice((16, 64, 256)), "image": 32}
        if healthy:
            model.update(depth=8, width=256, batch=512)
    job = {"seed": seed, "model": model, "graphs": r.random() < 0.2, "causes": causes}
    if "sync" in causes:
        job["sync"] = {"book": r.choice(("none", "cpu", "sleep")), "book_ms": r.choice((1.0, 3.0, 6.0))}
    if "loader" in causes:
        job["loader"] = {"workers": r.choice((0, 0, 1, 2)), "transform_ms": r.choice((2.0, 5.0, 10.0, 20.0))}
    if "pageable" in causes:
        job["pageable"] = {"copy_mb": r.choice((16, 64, 128))}
    if "churn" in causes:
        job["churn"] = {"max_mb": r.choice((64, 256, 1024))}
    if "checkpoint" in causes:
        job["checkpoint"] = {"every": r.choice((10, 25, 50))}
    if "prep" in causes:
        job["prep"] = {"prep_ms": r.choice((2.0, 5.0, 10.0, 20.0))}
    return job


def twins_of(job):
    """The twins of JOB, in the order they run (planted first and last, allfixed before it)."""
    out = []
    sync = job.get("sync")
    if sync:
        out.append("lognth")
        if sync["book"] != "none":
            out.append("nobook")
    for cause, twin in (("loader", "workers"), ("prep", "workers"), ("pageable", "pinned"), ("churn", "nochurn"),
                        ("contention", "alone"), ("checkpoint", "nockpt")):
        if cause in job["causes"]:
            out.append(twin)
    if not job["graphs"]:
        out.append("graph")
    return out


def fixes_of(job, variant):
    """The set of fixes VARIANT applies."""
    if variant == "planted":
        return set()
    if variant == "allfixed":
        return {t for t in twins_of(job) if t != "nobook"}
    return {variant}


# ----------------------------------------------------------------------------------------
# Everything below needs torch: `draw` above does not import it.

def run(seed, out_dir, seconds, traced_seconds):
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    job = draw(seed)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    hogs = [int(p) for p in os.environ.get("CORPUS_HOGS", "").split()]
    core = int(os.environ.get("CORPUS_CORE", "2"))
    all_cpus = sorted(os.sched_getaffinity(0))
    ckpt_path = os.path.join(os.environ.get("CORPUS_CKPT_DIR", "/tmp"), f"corpus_ckpt_{seed}.pt")
    m = job["model"]

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    def wait_for_go():
        # An empty read is corpus.sh gone (interrupted): stop, rather than run every twin.
        if not sys.stdin.readline():
            set_hogs(True)
            sys.exit("corpus.py: stdin closed; stopping")

    def build_model():
        torch.manual_seed(seed)
        if m["kind"] == "mlp":
            layers = []
            for _ in range(m["depth"]):
                layers += [nn.Linear(m["width"], m["width"]), nn.ReLU()]
            net = nn.Sequential(*layers, nn.Linear(m["width"], m["width"]))
            x_shape, y_shape = (m["batch"], m["width"]), (m["batch"], m["width"])
        elif m["kind"] == "transformer":
            layer = nn.TransformerEncoderLayer(m["width"], 8, 4 * m["width"], dropout=0.0, batch_first=True)
            net = nn.Sequential(nn.TransformerEncoder(layer, m["depth"], enable_nested_tensor=False),
                                nn.Linear(m["width"], m["width"]))
            x_shape = y_shape = (m["batch"], m["seq"], m["width"])
        else:
            c, layers = m["width"], [nn.Conv2d(3, m["width"], 3, padding=1), nn.ReLU()]
            for _ in range(m["depth"] - 1):
                layers += [nn.Conv2d(c, c, 3, padding=1), nn.ReLU()]
            net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))
            x_shape, y_shape = (m["batch"], 3, m["image"], m["image"]), (m["batch"], 10)
        return net.to(dev), x_shape, y_shape

    class Batches(torch.utils.data.Dataset):
        """Whole batches: transform_ms of numpy work on the sample, then a copy of it."""

        def __init__(self, shape, transform_ms):
            rng = np.random.default_rng(seed)
            self.base = rng.standard_normal(shape, dtype=np.float32)
            self.work = np.ones(4096, dtype=np.float64)
            self.transform_s = transform_ms / 1e3

        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            end = time.perf_counter() + self.transform_s
            while time.perf_counter() < end:
                np.sqrt(self.work, out=self.work)
                self.work += 1.0
            return self.base.copy()

    def make_batch(rows, prep_s):
        """A batch made through torch's CPU ops, as a script's own get_batch does: per-sample
        flips, scales and offsets of CPU tensors, stacked; for prep_s at least."""
        end = time.perf_counter() + prep_s
        out = None
        while out is None or time.perf_counter() < end:
            samples = [rows[i].flip(-1).mul(1.01).add(0.01) for i in range(rows.shape[0])]
            out = torch.stack(samples).clamp_(-4.0, 4.0)
        return out

    class Prepared(torch.utils.data.IterableDataset):
        """make_batch, run by a DataLoader's workers (the prep's `workers` twin)."""

        def __init__(self, rows, prep_s):
            self.rows, self.prep_s = rows, prep_s

        def __iter__(self):
            while True:
                yield make_batch(self.rows, self.prep_s)

    def free_affinity(_worker):
        os.sched_setaffinity(0, all_cpus)

    def set_hogs(running):
        for pid in hogs:
            try:
                os.kill(pid, signal.SIGCONT if running else signal.SIGSTOP)
            except ProcessLookupError:
                pass

    class Variant:
        """The planted job with FIXES applied: one step at a time."""

        def __init__(self, fixes):
            self.fixes = fixes
            self.net, x_shape, y_shape = build_model()
            self.graph_on = job["graphs"] or "graph" in fixes
            self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-4, capturable=self.graph_on)
            gen = torch.Generator(device=dev).manual_seed(seed)
            self.x = torch.randn(x_shape, device=dev, generator=gen)
            self.y = torch.randn(y_shape, device=dev, generator=gen)
            self.step_no = 0
            self.loss_sum = torch.zeros((), device=dev)
            self.loader_it = self.dl = None
            loader = job.get("loader")
            if loader:
                workers = TWIN_WORKERS if "workers" in fixes else loader["workers"]
                dl = torch.utils.data.DataLoader(
                    Batches(x_shape, loader["transform_ms"]), batch_size=None, num_workers=workers,
                    pin_memory=True, persistent_workers=workers > 0,
                    prefetch_factor=4 if workers > 0 else None,
                    worker_init_fn=free_affinity if workers > 0 else None)
                self.loader_it = iter(dl)
                self.dl = dl
            self.prep = self.prep_it = self.prep_dl = None
            prep = job.get("prep")
            if prep:
                rows = torch.randn(x_shape, generator=torch.Generator().manual_seed(seed))
                self.prep = (rows, prep["prep_ms"] / 1e3)
                if "workers" in fixes:
                    self.prep_dl = torch.utils.data.DataLoader(
                        Prepared(rows, prep["prep_ms"] / 1e3), batch_size=None, num_workers=TWIN_WORKERS,
                        pin_memory=True, persistent_workers=True, prefetch_factor=4, worker_init_fn=free_affinity)
                    self.prep_it = iter(self.prep_dl)
            self.side = None
            if job.get("pageable"):
                n = job["pageable"]["copy_mb"] << 18  # float32 elements
                self.side_pinned = "pinned" in fixes
                self.side = torch.ones(n, pin_memory=self.side_pinned)
                self.side_dev = torch.empty(n, device=dev)
            self.churn_sizes = []
            if job.get("churn") and "nochurn" not in fixes:
                top = job["churn"]["max_mb"] << 18
                self.churn_sizes = [top // 4, top // 2, top * 3 // 4, top]
            self.graph = None
            if self.graph_on:
                self._capture()

        def _eager(self):
            self.opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(self.net(self.x), self.y)
            loss.backward()
            self.opt.step()
            return loss

        def _capture(self):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self._eager()
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)
            # Captured on the stream it was warmed up on (cuDNN's state for a conv net is
            # made there, not inside the capture). Thread-local: the DataLoader's pin-memory
            # thread, already started, may call CUDA meanwhile, which a global capture refuses
            # (seed 1010's twin, cudaErrorStreamCaptureInvalidated).
            with torch.cuda.graph(self.graph, stream=s, capture_error_mode="thread_local"):
                self.static_loss = F.mse_loss(self.net(self.x), self.y)
                self.static_loss.backward()
                self.opt.step()

        def one_step(self):
            if self.loader_it is not None:
                self.x.copy_(next(self.loader_it), non_blocking=True)
            if self.prep_it is not None:
                self.x.copy_(next(self.prep_it), non_blocking=True)
            elif self.prep is not None:
                self.x.copy_(make_batch(*self.prep))
            if self.side is not None:
                self.side_dev.copy_(self.side, non_blocking=self.side_pinned)
            if self.churn_sizes:
                torch.cuda.empty_cache()
                buf = torch.empty(self.churn_sizes[self.step_no % 4], device=dev)
                buf.fill_(1.0)
                del buf
            if self.graph is not None:
                self.graph.replay()
                loss = self.static_loss
            else:
                loss = self._eager()
            sync = job.get("sync")
            if sync:
                self._sync(sync, loss)
            ckpt = job.get("checkpoint")
            if ckpt and "nockpt" not in self.fixes and self.step_no % ckpt["every"] == ckpt["every"] - 1:
                torch.save({"model": self.net.state_dict(), "opt": self.opt.state_dict()}, ckpt_path)
            self.step_no += 1

        def _sync(self, sync, loss):
            if "lognth" in self.fixes:
                self.loss_sum += loss.detach()
                if self.step_no % LOG_EVERY != LOG_EVERY - 1:
                    return
                value = self.loss_sum.item() / LOG_EVERY
                self.loss_sum.zero_()
            else:
                value = loss.item()
            if "nobook" not in self.fixes:
                self._book(sync, value)

        @staticmethod
        def _book(sync, value):
            seconds = sync["book_ms"] / 1e3
            if sync["book"] == "cpu":
                end = time.perf_counter() + seconds
                acc = value
                while time.perf_counter() < end:
                    acc = acc * 0.999 + 1e-3
            elif sync["book"] == "sleep":
                time.sleep(seconds)

        def train(self, seconds):
            n, deadline = 0, time.perf_counter() + seconds
            while n == 0 or time.perf_counter() < deadline:
                self.one_step()
                n += 1
            torch.cuda.synchronize()
            return n

        def close(self):
            # Persistent workers live as long as their loader: end them before the next twin.
            for it in (self.loader_it, self.prep_it):
                if it is not None and hasattr(it, "_shutdown_workers"):
                    it._shutdown_workers()
            self.loader_it = self.dl = self.prep_it = self.prep_dl = None
            self.graph = None

    def measured(variant, secs, without=()):
        fixes = fixes_of(job, variant) - set(without)
        set_hogs("contention" in job["causes"] and "alone" not in fixes)
        v = Variant(fixes)
        v.train(min(0.75, secs / 2))
        t0 = time.perf_counter()
        n = v.train(secs)
        took = time.perf_counter() - t0
        v.close()
        del v
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        log(f"seed {seed} {variant}: {n} steps in {took:.2f} s = {n / took:.1f} steps/s")
        return {"steps": n, "seconds": round(took, 4), "steps_per_s": round(n / took, 3)}

    if "contention" in job["causes"]:
        # torch's intra-op pool is made first, on every core: made after the pinning, its
        # threads would be pinned with the training thread to that one core (generator 1),
        # a planted cause the `alone` twin does not remove.
        torch.ones(256, 256) @ torch.ones(256, 256)
        os.sched_setaffinity(0, {core})
    set_hogs(False)
    log(f"seed {seed}: {json.dumps(job)}")

    # The traced run: the planted job as the recorder sees it.
    set_hogs("contention" in job["causes"])
    planted = Variant(set())
    planted.train(1.5)
    print("ready", flush=True)
    wait_for_go()
    t0 = time.perf_counter()
    traced_steps = planted.train(traced_seconds)
    traced = {"steps": traced_steps, "seconds": round(time.perf_counter() - t0, 4)}
    planted.close()
    del planted
    set_hogs(False)
    print(f"traced {traced_steps}", flush=True)
    wait_for_go()

    runs = {"planted": [measured("planted", seconds)]}
    failed = {}
    for twin in twins_of(job) + ["allfixed"]:
        # A twin that cannot be built (a capture PyTorch refuses) is left out and said; the
        # all-fixed twin then goes without it.
        try:
            runs[twin] = [measured(twin, seconds, without=failed)]
        except Exception as e:  # noqa: BLE001 - any failure of one twin
            log(f"seed {seed} {twin}: failed: {e!r}")
            failed[twin] = repr(e)[:300]
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    runs["planted"].append(measured("planted", seconds))
    set_hogs(False)
    try:
        os.unlink(ckpt_path)
    except FileNotFoundError:
        pass

    def rate(name):
        return sum(r["steps_per_s"] for r in runs[name]) / len(runs[name])

    base = rate("planted")
    result = {
        "seed": seed,
        # 2: torch's intra-op pool is made before the training thread is pinned (1: after).
        "generator": GENERATOR,
        "job": job,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "seconds": seconds,
        "traced": traced,
        "planted_steps_per_s": round(base, 3),
        "runs": runs,
        "twins": {name: {"steps_per_s": round(rate(name), 3), "speedup": round(rate(name) / base, 4)}
                  for name in runs if name != "planted"},
        "failed_twins": failed,
    }
    with open(os.path.join(out_dir, f"{seed}.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    if os.environ.get("CORPUS_RECORD_FIXED") == "1":
        # The all-fixed twin traced too, as the planted job was: a real pair for `gputrace
        # diff` (corpus.sh records it into SEED.fixed.gtr).
        set_hogs(False)
        fixed = Variant(fixes_of(job, "allfixed") - set(failed))
        fixed.train(1.0)
        print("fixed-ready", flush=True)
        wait_for_go()
        n = fixed.train(traced_seconds)
        fixed.close()
        print(f"fixed-traced {n}", flush=True)
    print("done", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw")
    d.add_argument("seed", type=int)
    r = sub.add_parser("run")
    r.add_argument("seed", type=int)
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=2.5)
    r.add_argument("--traced-seconds", type=float, default=3.5)
    a = p.parse_args()
    if a.cmd == "draw":
        job = draw(a.seed)
        job["twins"] = twins_of(job)
        print(json.dumps(job, sort_keys=True))
        return 0
    run(a.seed, a.out, a.seconds, a.traced_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
