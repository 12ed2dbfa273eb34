"""Evaluates once before training (baseline), then every epoch; stores metrics as floats."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1500, 20)
y = ((X[:, 0] > 0).long() + (X[:, 1] > 0).long())
train_loader = DataLoader(TensorDataset(X[:1200], y[:1200]), batch_size=48, shuffle=True)
val_loader = DataLoader(TensorDataset(X[1200:], y[1200:]), batch_size=300)

model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
history = {"train_loss": [], "val_loss": []}


def validate():
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for xb, yb in val_loader:
            total += nn.functional.cross_entropy(model(xb), yb, reduction="sum").item()
    model.train()
    return total / 300


history["val_loss"].append(validate())
for epoch in range(4):
    for xb, yb in train_loader:
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history["train_loss"].append(loss.item())
    history["val_loss"].append(validate())
print(history["val_loss"])
