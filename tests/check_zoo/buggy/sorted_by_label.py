# expect: no-shuffle
"""Samples stored class by class (as read from per-class folders); the loader does not shuffle."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
order = y.argsort(kind="stable")
X, y = torch.tensor(X[order] / 16.0, dtype=torch.float32), torch.tensor(y[order])
loader = DataLoader(TensorDataset(X, y), batch_size=32)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
