# expect: eval-without-no-grad
# Validation in eval mode but without torch.no_grad(): each validation forward builds a graph nobody uses.
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(1300, 12)
y = (X[:, 0] * X[:, 1] > 0).long()
Xtr, ytr, Xva, yva = X[:1000], y[:1000], X[1000:], y[1000:]
model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
crit = nn.CrossEntropyLoss()
for epoch in range(6):
    model.train()
    perm = torch.randperm(1000)
    for i in range(0, 1000, 50):
        b = perm[i:i + 50]
        opt.zero_grad()
        loss = crit(model(Xtr[b]), ytr[b])
        loss.backward()
        opt.step()
    model.eval()
    val_loss = crit(model(Xva), yva).item()
    print(epoch, round(loss.item(), 3), round(val_loss, 3))
