"""A plain training loop run through accelerate (Accelerator(cpu=True)) on three Gaussian blobs. Correct."""
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

set_seed(0)


def blobs(n: int, generator: torch.Generator) -> TensorDataset:
    centers = torch.tensor([[2.0, 0.0] * 5, [0.0, 2.0] * 5, [-2.0, -2.0] * 5]) / 2
    y = torch.arange(n) % 3
    x = centers[y] + torch.randn(n, 10, generator=generator)
    return TensorDataset(x, y)


g = torch.Generator().manual_seed(0)
accelerator = Accelerator(cpu=True)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loader = DataLoader(blobs(480, g), batch_size=32, shuffle=True)
val_loader = DataLoader(blobs(96, g), batch_size=32)
model, optimizer, loader, val_loader = accelerator.prepare(model, optimizer, loader, val_loader)

for epoch in range(4):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    accelerator.print(f"epoch {epoch} val acc {correct / total:.3f}")
