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


fakegpu.load(sys.argv[1])
lightning.Trainer(max_steps=int(sys.argv[2])).fit(Classifier())
print("done", os.getpid())
