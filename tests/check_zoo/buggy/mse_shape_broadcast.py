# expect: wrong-loss-for-task
"""Regression where the prediction is (N, 1) and the target (N,): MSE broadcasts to (N, N)."""
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")
torch.manual_seed(0)
X = torch.randn(1500, 6)
y = X @ torch.tensor([1.0, -2.0, 0.5, 0.0, 0.0, 3.0])
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    perm = torch.randperm(1500)
    for i in range(0, 1500, 50):
        b = perm[i:i + 50]
        opt.zero_grad()
        loss = nn.MSELoss()(model(X[b]), y[b])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
