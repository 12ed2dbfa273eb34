# Tabular regression with nn.Sequential and manual mini-batches (no DataLoader).
import torch
from torch import nn

torch.manual_seed(1)
n, d = 2000, 12
X = torch.randn(n, d)
w_true = torch.randn(d, 1)
y = (X @ w_true).squeeze(1) + 0.1 * torch.randn(n)
X_tr, y_tr, X_va, y_va = X[:1600], y[:1600], X[1600:], y[1600:]

net = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
loss_fn = nn.MSELoss()

for epoch in range(6):
    idx = torch.randperm(len(X_tr))
    for i in range(0, len(idx), 50):
        b = idx[i:i + 50]
        pred = net(X_tr[b]).squeeze(-1)
        loss = loss_fn(pred, y_tr[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val = loss_fn(net(X_va).squeeze(-1), y_va).item()
    print(epoch, round(val, 4))
