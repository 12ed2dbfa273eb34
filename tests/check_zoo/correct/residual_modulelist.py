# Residual MLP with blocks in an nn.ModuleList, LayerNorm, AdamW and a cosine schedule.
import torch
from torch import nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class ResMLP(nn.Module):
    def __init__(self, d_in, d, depth, n_out):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(depth)])
        self.out = nn.Linear(d, n_out)

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            x = blk(x)
        return self.out(x)


X = torch.randn(1600, 20)
y = (X[:, :5].sum(1) > 0).long() + 2 * (X[:, 5:10].sum(1) > 0).long()
model = ResMLP(20, 48, 4, 4)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
lossf = nn.CrossEntropyLoss()
step = 0
for epoch in range(8):
    perm = torch.randperm(1600)
    for i in range(0, 1600, 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = lossf(model(X[b]), y[b])
        loss.backward()
        opt.step()
        sched.step()
        step += 1
print("final loss", loss.item())
