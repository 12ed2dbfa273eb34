"""Regression with a summed squared error (reduction="sum") and plain SGD at a matching small lr.

Gradients are batch-size times those of the mean loss, the lr is that much smaller: healthy updates."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(4096, 16)
y = torch.sin(X[:, :4]).sum(1, keepdim=True) * 3 + 0.1 * torch.randn(4096, 1)

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
criterion = nn.MSELoss(reduction="sum")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
for epoch in range(5):
    total = 0.0
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 256):
        xb, yb = X[perm[i:i + 256]], y[perm[i:i + 256]]
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(epoch, total / len(X))
