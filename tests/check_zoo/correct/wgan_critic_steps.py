"""WGAN with weight clipping: five critic steps per generator step, critic loss mean(D(fake)) - mean(D(real)),
generator loss -mean(D(fake)). Neither objective is a loss against targets; both go up and down by design."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
real = torch.randn(4096, 2) * torch.tensor([0.5, 2.0]) + torch.tensor([2.0, 0.0])
loader = DataLoader(TensorDataset(real), batch_size=64, shuffle=True, drop_last=True)
G = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 1))
opt_g = torch.optim.RMSprop(G.parameters(), lr=5e-5)
opt_d = torch.optim.RMSprop(D.parameters(), lr=5e-5)
for epoch in range(4):
    for i, (x,) in enumerate(loader):
        opt_d.zero_grad()
        fake = G(torch.randn(64, 4)).detach()
        loss_d = D(fake).mean() - D(x).mean()
        loss_d.backward()
        opt_d.step()
        for p in D.parameters():
            p.data.clamp_(-0.01, 0.01)
        if i % 5 == 0:
            opt_g.zero_grad()
            loss_g = -D(G(torch.randn(64, 4))).mean()
            loss_g.backward()
            opt_g.step()
print("done")
