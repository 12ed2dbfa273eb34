"""Imbalanced classes handled with class weights in the loss."""
import torch
import torch.nn as nn

torch.manual_seed(0)
n_major, n_minor = 1800, 120
X = torch.cat([torch.randn(n_major, 6) - 0.7, torch.randn(n_minor, 6) + 0.7])
y = torch.cat([torch.zeros(n_major, dtype=torch.long), torch.ones(n_minor, dtype=torch.long)])
counts = torch.bincount(y).float()
criterion = nn.CrossEntropyLoss(weight=counts.sum() / (2 * counts))
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for epoch in range(4):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = criterion(model(X[b]), y[b])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
