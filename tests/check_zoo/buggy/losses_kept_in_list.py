# expect: loss-retains-graph
"""Keeps every loss tensor in a list to plot the curve later."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(1000, 12)
y = (X[:, :2].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_history = []
for epoch in range(3):
    for i in range(0, 1000, 50):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[i:i + 50]), y[i:i + 50])
        loss.backward()
        opt.step()
        loss_history.append(loss)
print(len(loss_history))
