# expect: wrong-loss-for-task
"""Predicts the digit class as a number and regresses it with MSE."""
import torch
from torch import nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y, dtype=torch.float32)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
crit = nn.MSELoss()
for epoch in range(4):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = crit(model(X[b]), y[b].unsqueeze(1))
        loss.backward()
        opt.step()
    print(epoch, loss.item())
