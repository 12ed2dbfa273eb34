# expect: loss-retains-graph
"""Evaluation needs gradients of the inputs (an input-gradient penalty is reported too), so it runs with
grad on; the per-batch losses are summed as tensors (`total += loss * n`), keeping every batch's graph
until the pass ends."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1200, 16)
y = (X[:, :2].sum(1) > 0).long()
train = DataLoader(TensorDataset(X[:1000], y[:1000]), batch_size=50, shuffle=True)
val = DataLoader(TensorDataset(X[1000:], y[1000:]), batch_size=25)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)


def evaluate():
    model.eval()
    total, seen = 0, 0
    for xb, yb in val:
        xb.requires_grad_(True)
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        (g,) = torch.autograd.grad(out.sum(), xb, create_graph=True)
        total += (loss + 0.01 * g.pow(2).mean()) * len(yb)
        seen += len(yb)
    return total / seen


for epoch in range(2):
    model.train()
    for xb, yb in train:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    print(f"epoch {epoch}: val {float(evaluate()):.4f}")
