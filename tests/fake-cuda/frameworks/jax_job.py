"""A user's JAX script on the fake CUDA: `jax_job.py FAKE_CUDA_DIR STEPS`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import fakegpu  # noqa: E402
import jax  # noqa: E402


@jax.jit
def step(i):
    fakegpu.launch(100)
    fakegpu.synchronize()


fakegpu.load(sys.argv[1])
for i in range(int(sys.argv[2])):
    step(i)
print("done", os.getpid())
