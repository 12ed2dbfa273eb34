"""One long epoch (2,000 batches) of a 10-class problem with plain SGD: the loss falls slowly at
first (2.31 -> ~2.2 over the first few hundred steps), as it normally does; it keeps falling later."""
import torch
import torch.nn as nn

torch.manual_seed(0)
N, D, C = 64_000, 32, 10
teacher = torch.randn(D, C)
X = torch.randn(N, D)
y = (X @ teacher + 2.0 * torch.randn(N, C)).argmax(1)

model = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, C))
optimizer = torch.optim.SGD(model.parameters(), lr=0.003)
criterion = nn.CrossEntropyLoss()
bs = 32
for epoch in range(1):
    perm = torch.randperm(N)
    for i in range(N // bs):
        idx = perm[i * bs:(i + 1) * bs]
        optimizer.zero_grad()
        loss = criterion(model(X[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if i % 200 == 0:
            print(i, loss.item())
