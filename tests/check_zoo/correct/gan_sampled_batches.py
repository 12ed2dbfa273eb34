"""A GAN with no DataLoader: real batches are sampled from a tensor; the discriminator takes two
backward() calls per step (real, then fake), its loss rises as the generator improves."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
data = torch.cat([torch.randn(2000, 2) * 0.3 + torch.tensor([2.0, 0.0]),
                  torch.randn(2000, 2) * 0.3 + torch.tensor([-2.0, 0.0])])


def get_batch(n=128):
    return data[torch.randint(0, len(data), (n,))]


G = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=5e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=5e-4, betas=(0.5, 0.999))
for it in range(250):
    real = get_batch()
    z = torch.randn(128, 4)
    opt_d.zero_grad()
    d_real = F.binary_cross_entropy_with_logits(D(real), torch.ones(128, 1))
    d_real.backward()
    fake = G(z)
    d_fake = F.binary_cross_entropy_with_logits(D(fake.detach()), torch.zeros(128, 1))
    d_fake.backward()
    d_loss = d_real + d_fake
    opt_d.step()
    opt_g.zero_grad()
    g_loss = F.binary_cross_entropy_with_logits(D(fake), torch.ones(128, 1))
    g_loss.backward()
    opt_g.step()
    if it % 50 == 0:
        print(it, d_loss.item(), g_loss.item())
