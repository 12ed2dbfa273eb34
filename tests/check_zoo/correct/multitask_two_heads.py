"""Shared trunk with a classification head and a regression head; the two losses are summed."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1600, 16)
cls = (X[:, 0] + X[:, 1] > 0).long()
reg = X[:, 2] * 1.5 - X[:, 3] + 0.1 * torch.randn(1600)


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.cls_head = nn.Linear(64, 2)
        self.reg_head = nn.Linear(64, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


model = MultiTask()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for epoch in range(5):
    perm = torch.randperm(1600)
    for i in range(0, 1600, 64):
        b = perm[i:i + 64]
        logits, value = model(X[b])
        loss = F.cross_entropy(logits, cls[b]) + F.smooth_l1_loss(value, reg[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    print(epoch, torch.stack(losses[-25:]).mean().item())
