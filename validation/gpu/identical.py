"""Training is bit-identical with and without tracing (issue #10): a seeded MLP trains 300
deterministic steps (fixed seed, deterministic algorithms, copies, an .item() every 50 steps)
and prints the SHA-256 of every parameter's bytes."""
import hashlib
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
dev = "cuda"
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
g = torch.Generator().manual_seed(99)
for step in range(300):
    x = torch.randn(256, 1024, generator=g).to(dev)
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 50 == 0:
        loss.item()
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().cpu().numpy().tobytes())
print(h.hexdigest())
