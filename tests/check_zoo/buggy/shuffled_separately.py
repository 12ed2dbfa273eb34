# expect: loss-not-decreasing
"""Features and labels are shuffled with two different permutations."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(5):
    X = X[torch.randperm(len(X))]
    y = y[torch.randperm(len(y))]
    for i in range(0, len(X), 64):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[i:i + 64]), y[i:i + 64])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
