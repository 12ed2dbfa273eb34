# expect: output-classes-mismatch
"""A 1000-way ImageNet-sized head trained on a 10-class problem: 990 outputs can never be right."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
centers = torch.randn(10, 20) * 2
y_all = torch.randint(0, 10, (2000,))
x_all = centers[y_all] + torch.randn(2000, 20)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1000))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    perm = torch.randperm(len(x_all))
    for i in range(0, 960, 64):
        b = perm[i:i + 64]
        loss = F.cross_entropy(model(x_all[b]), y_all[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
