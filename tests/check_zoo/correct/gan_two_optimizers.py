"""A small GAN on 2-D points: two models, two optimizers, detach() for the discriminator step."""
import torch
import torch.nn as nn

torch.manual_seed(0)
real_data = torch.randn(2048, 2) * torch.tensor([0.5, 2.0]) + torch.tensor([1.0, -1.0])
G = nn.Sequential(nn.Linear(4, 32), nn.LeakyReLU(0.2), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
for it in range(120):
    real = real_data[torch.randint(0, len(real_data), (64,))]
    fake = G(torch.randn(64, 4))
    D.zero_grad()
    loss_d = bce(D(real), ones) + bce(D(fake.detach()), zeros)
    loss_d.backward()
    opt_d.step()
    G.zero_grad()
    loss_g = bce(D(fake), ones)
    loss_g.backward()
    opt_g.step()
    if it % 40 == 0:
        print(it, loss_d.item(), loss_g.item())
