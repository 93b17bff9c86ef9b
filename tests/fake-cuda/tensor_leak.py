"""A Python training loop on the fake caching allocator (c10/libc10_cuda.so): every step makes
and drops temporaries in forward(), and keep_outputs() keeps one 1 MiB output alive per step
(as `preds.append(out)` does). Device memory grows at the driver as the allocator reserves
segments for the kept blocks; the blocks kept were made by make_output().
With --reserve-mib N the allocator reserves N MiB first (a cache warmed up by earlier steps):
the kept blocks then fit in it, and the driver sees no growth at all. With --throw the job
first asks for more than the fake GPU has: the allocator throws, and the job catches it.
With --quick-output make_output() returns as soon as its block is handed out, and the step
fills the output in fill(), as a real tensor op returns once its kernel is queued: a line read
from outside after the call finds the thread in fill(), not in make_output().
With --grads-mib N every step also makes N MiB of "gradients" in backward(), given back at the
next step's start (as zero_grad(set_to_none=True) does): the last step's are live at the end
and outweigh the kept outputs, yet they are no leak.
`tensor_leak.py FAKE_CUDA_DIR C10_DIR STEPS [--no-leak] [--reserve-mib N] [--throw] [--quick-output] [--grads-mib N]`."""
import ctypes
import os
import sys
import time

runtime = ctypes.CDLL(os.path.join(sys.argv[1], "libcudart.so.13"))
c10 = ctypes.CDLL(os.path.join(sys.argv[2], "libc10_cuda.so"))
c10.fake_tensor_alloc.restype = ctypes.c_void_p
c10.fake_tensor_alloc.argtypes = [ctypes.c_ulong]
c10.fake_tensor_free.argtypes = [ctypes.c_void_p]
LEAK = "--no-leak" not in sys.argv
QUICK = "--quick-output" in sys.argv
GRADS = int(sys.argv[sys.argv.index("--grads-mib") + 1]) << 20 if "--grads-mib" in sys.argv else 0
kept = []


def spin(seconds):
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def forward():
    # Activations made and dropped within the step: blocks handed out and given back.
    temporaries = [c10.fake_tensor_alloc(256 << 10) for _ in range(4)]
    spin(0.002)
    for t in temporaries:
        c10.fake_tensor_free(t)
    return make_output()


def make_output():
    # A tensor op: its output's block, then the work that fills it.
    out = c10.fake_tensor_alloc(1 << 20)  # the output's block
    if QUICK:
        return out
    spin(0.005)
    return out


def fill(out):
    # The work on an output made quickly: the thread spends its time here, not where the
    # block was made.
    spin(0.005)


def keep_outputs(out):
    # The leak: the step's output outlives the step.
    kept.append(out)


def backward(grads):
    # The step's gradients, each step's given back as the next one starts.
    for g in grads:
        c10.fake_tensor_free(g)
    return [c10.fake_tensor_alloc(GRADS)] if GRADS else []


def train(steps):
    grads = []
    for _ in range(steps):
        out = forward()
        if QUICK:
            fill(out)
        grads = backward(grads)
        if LEAK:
            keep_outputs(out)
        else:
            c10.fake_tensor_free(out)
        time.sleep(0.001)


# A context, as a real job makes before its first tensor; then its set-up (an import, a
# dataset opened), during which gputrace finds and probes the allocator's library.
runtime.cudaFree(ctypes.c_void_p(0))
if "--reserve-mib" in sys.argv:
    if c10.fake_allocator_reserve(ctypes.c_ulong(int(sys.argv[sys.argv.index("--reserve-mib") + 1]) << 20)) != 0:
        raise MemoryError("reserve failed")
time.sleep(0.5)
if "--throw" in sys.argv and c10.fake_tensor_alloc(1 << 41) is not None:
    raise SystemExit("the allocator met a request for 2 TiB")
train(int(sys.argv[3]))
print("done", os.getpid())
