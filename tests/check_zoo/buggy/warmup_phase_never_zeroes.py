# expect: missing-zero-grad
"""A short first phase trains a new head with its own optimizer and never zeroes the gradients; the main
loop afterwards, with another optimizer, is correct and has more steps."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(960, 12)
y = (X[:, 0] - X[:, 1] > 0).long()
loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 2))

head_opt = torch.optim.Adam(model[2].parameters(), lr=1e-3)
for i, (xb, yb) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    head_opt.step()
    if i == 4:
        break

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    print(epoch, float(loss))
