"""Residual MLP on synthetic data: each block's second layer starts at zero, so blocks start as identities."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(2000, 16)
y = ((X[:, :4].sum(1) > 0).long() + (X[:, 4] > 0.5).long())


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


model = nn.Sequential(nn.Linear(16, 32), Block(32), Block(32), nn.Linear(32, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(4):
    perm = torch.randperm(2000)
    for i in range(0, 2000, 100):
        b = perm[i:i + 100]
        optimizer.zero_grad()
        loss = criterion(model(X[b]), y[b])
        loss.backward()
        optimizer.step()
    print(epoch, round(loss.item(), 3))
