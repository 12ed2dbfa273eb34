# expect: label-imbalance
"""Fraud-like data: 3% positives, plain cross entropy, no weights or balanced sampling."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
n = 3000
y = (torch.rand(n) < 0.03).long()
X = torch.randn(n, 10) + y.unsqueeze(1) * 0.8
loader = DataLoader(TensorDataset(X, y), batch_size=100, shuffle=True)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
