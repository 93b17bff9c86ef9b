"""A Python training loop that keeps every step's activations alive (as a list of losses kept
with their graph does): device memory grows, allocated in forward(). Drives the fake CUDA
runtime through ctypes: `leak.py FAKE_CUDA_DIR STEPS`."""
import ctypes
import os
import sys
import time

runtime = ctypes.CDLL(os.path.join(sys.argv[1], "libcudart.so.13"))
kept = []


def forward(nbytes):
    activations = ctypes.c_void_p()
    if runtime.cudaMalloc(ctypes.byref(activations), ctypes.c_size_t(nbytes)) != 0:
        raise MemoryError("cudaMalloc failed")
    # The rest of the forward pass: host work that launches the step's kernels.
    until = time.perf_counter() + 0.003
    while time.perf_counter() < until:
        pass
    return activations


def train(steps):
    for _ in range(steps):
        kept.append(forward(1 << 20))
        time.sleep(0.002)


train(int(sys.argv[2]))
print("done", os.getpid())
