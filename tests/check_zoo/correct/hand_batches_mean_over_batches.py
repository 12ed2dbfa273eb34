"""Batches cut by hand from tensors (no DataLoader), a hand-written mean loss plus an L2 term, the per-batch loss
printed every 20 steps and the epoch loss as the sum of the batch means over the number of batches."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(600, 4)
Y = X @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1 * torch.randn(600)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
N, batch_size = len(Y), 10
for epoch in range(3):
    perm = torch.randperm(N)
    total, batches = 0.0, 0
    for i in range(0, N, batch_size):
        x, y = X[perm[i:i + batch_size]], Y[perm[i:i + batch_size]]
        optimizer.zero_grad()
        loss = ((model(x).squeeze(1) - y) ** 2).mean() + 1e-3 * model.weight.pow(2).sum()
        loss.backward()
        optimizer.step()
        total += loss.item()
        batches += 1
        if batches % 20 == 0:
            print(f"  step {batches}: loss {loss.item():.6f}")
    print(f"epoch {epoch}: mean loss {total / batches:.6f} over {batches} batches")
