"""A small GAN over a DataLoader of 2-D points: per batch a discriminator step, then a generator step.

The generator's backward also leaves gradients on the discriminator; D.zero_grad() clears them
before the next discriminator backward, so each optimizer step uses one backward's gradients.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
points = torch.randn(2048, 2) * torch.tensor([0.5, 2.0]) + torch.tensor([1.0, -1.0])
loader = DataLoader(TensorDataset(points), batch_size=64, shuffle=True)
G = nn.Sequential(nn.Linear(4, 32), nn.LeakyReLU(0.2), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
labels = torch.cat([torch.ones(64, 1), torch.zeros(64, 1)])
for epoch in range(2):
    for (real,) in loader:
        fake = G(torch.randn(len(real), 4))
        D.zero_grad()
        loss_d = bce(D(torch.cat([real, fake.detach()])), labels[: 2 * len(real)])
        loss_d.backward()
        opt_d.step()
        G.zero_grad()
        loss_g = bce(D(fake), torch.ones(len(real), 1))
        loss_g.backward()
        opt_g.step()
    print(epoch, round(loss_d.item(), 3), round(loss_g.item(), 3))
