"""A user's Lightning script on the fake CUDA: `lightning_job.py FAKE_CUDA_DIR STEPS`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import fakegpu  # noqa: E402
import lightning  # noqa: E402


class Classifier:
    def training_step(self, step):
        fakegpu.launch(50)
        fakegpu.launch(50)


def prepare_dataset():
    """Set-up before any GPU work (as imports and dataset building are): no site of a
    diagnosis about the training may name it."""
    fakegpu.busy(400.0)


fakegpu.load(sys.argv[1])
prepare_dataset()
lightning.Trainer(max_steps=int(sys.argv[2])).fit(Classifier())
print("done", os.getpid())
