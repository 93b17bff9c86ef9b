"""A user's training script in one of several frameworks, on the fake CUDA:
`framework_job.py FAKE_CUDA_DIR STEPS pytorch|hf|deepspeed|tensorflow`. Each step launches
two 50 µs kernels, waits for them, and spends 3 ms of host time inside the framework (its
collate, its timers, its input map): host time the GPU waits for."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import fakegpu  # noqa: E402


def kernels(step):
    fakegpu.launch(50)
    fakegpu.launch(50)


fakegpu.load(sys.argv[1])
steps, framework = int(sys.argv[2]), sys.argv[3]
if framework == "pytorch":
    import torch
    from torch.utils.data import DataLoader

    model = torch.Module()
    for batch in DataLoader(steps):
        model(batch)
        torch.synchronize()
elif framework == "hf":
    import transformers

    transformers.Trainer(kernels, steps).train()
elif framework == "deepspeed":
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(kernels)
    for step in range(steps):
        engine.train_batch(step)
elif framework == "tensorflow":
    import tensorflow

    def step_fn(batch):
        kernels(batch)
        fakegpu.synchronize()

    tensorflow.fit(step_fn, steps)
else:
    sys.exit(f"unknown framework {framework}")
print("done", os.getpid())
