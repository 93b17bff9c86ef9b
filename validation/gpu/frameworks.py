#!/usr/bin/env python3
"""frameworks.py MODE [--seconds S] - one small training job per framework (issue 35).

Each job is written as that framework's own docs would have a new user write it, with its
defaults, and trains for S wall seconds (default 6) after its imports. gputrace should name
the framework (target.framework), split the time beneath the framework's entry call
(sites[].inside), and say its fix in the framework's terms.

  lightning  a Lightning MLP with its defaults: progress bar on, self.log every step, a
             TensorDataset loaded with num_workers=0
  jax        a jitted MLP step with optax, batch 32; JAX preallocates 75 % of the GPU
  hf         a transformers Trainer on a small BERT made from a config (no download)
  pytorch    the Lightning job's model and data in a plain PyTorch loop

Exit status 3 when the framework is not installed (the job is skipped, not failed).
"""
import argparse
import sys
import time


def missing(name):
    print(f"frameworks.py: {name} is not installed here", file=sys.stderr)
    sys.exit(3)


def lightning_job(seconds):
    try:
        import lightning as L
    except ImportError:
        try:
            import pytorch_lightning as L
        except ImportError:
            missing("lightning")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    x, y = torch.randn(200_000, 256), torch.randint(0, 10, (200_000,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=-1, max_time={"seconds": seconds},
                        enable_checkpointing=False)
    trainer.fit(Classifier(), loader)
    return trainer.global_step


def pytorch_job(seconds):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.randn(200_000, 256), torch.randint(0, 10, (200_000,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    steps, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(net(xb.cuda()), yb.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if time.perf_counter() >= deadline:
                break
    return steps


def jax_job(seconds):
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError:
        missing("jax and optax")

    key = jax.random.PRNGKey(0)
    sizes = [256, 512, 512, 10]
    keys = jax.random.split(key, len(sizes))
    params = [(jax.random.normal(k, (a, b)) * 0.02, jnp.zeros(b)) for k, a, b in zip(keys, sizes[:-1], sizes[1:])]
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return optax.softmax_cross_entropy_with_integer_labels(h @ w + b, y).mean()

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    x = jax.random.normal(keys[0], (32, 256))
    y = jax.random.randint(keys[1], (32,), 0, 10)
    steps, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        params, opt_state, loss = step(params, opt_state, x, y)
        steps += 1
    loss.block_until_ready()
    return steps


def hf_job(seconds):
    try:
        import torch
        from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, TrainerCallback
    except ImportError:
        missing("transformers")

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 1_000_000

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 8000, (128,), generator=g), "labels": int(i % 2)}

    class StopAfter(TrainerCallback):
        def __init__(self, seconds):
            self.deadline = time.perf_counter() + seconds

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = time.perf_counter() >= self.deadline

    config = BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    args = TrainingArguments(output_dir="/tmp/gputrace-hf", per_device_train_batch_size=32, max_steps=1_000_000,
                             report_to="none", save_strategy="no", logging_steps=50, disable_tqdm=False)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens(),
                      callbacks=[StopAfter(seconds)])
    trainer.train()
    return trainer.state.global_step


JOBS = {"lightning": lightning_job, "jax": jax_job, "hf": hf_job, "pytorch": pytorch_job}

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(JOBS))
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    started = time.perf_counter()
    steps = JOBS[args.mode](args.seconds)
    print(f"done {steps} steps in {time.perf_counter() - started:.1f} s", flush=True)
