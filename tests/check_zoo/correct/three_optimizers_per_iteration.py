"""Three optimizers stepping in turn every iteration (an InfoGAN-like generator, least-squares discriminator
and auxiliary head): each loss variable is rebound only at the next iteration, three optimizer steps later.
That is not keeping losses alive."""
import torch
import torch.nn as nn

torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
disc = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
aux = nn.Linear(2, 4)
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
opt_a = torch.optim.Adam(list(gen.parameters()) + list(aux.parameters()), lr=1e-3)
mse = nn.MSELoss()  # least-squares GAN losses
real_data = torch.randn(2000, 2) * 0.3 + 1.0
for it in range(60):
    real = real_data[torch.randint(0, 2000, (32,))]
    z = torch.randn(32, 4)
    opt_g.zero_grad()
    g_loss = mse(disc(gen(z)), torch.ones(32, 1))
    g_loss.backward()
    opt_g.step()
    opt_d.zero_grad()
    d_loss = mse(disc(real), torch.ones(32, 1)) + mse(disc(gen(z).detach()), torch.zeros(32, 1))
    d_loss.backward()
    opt_d.step()
    opt_a.zero_grad()
    info_loss = (aux(gen(z)) - z).pow(2).mean()
    info_loss.backward()
    opt_a.step()
    if it % 20 == 0:
        print(f"iteration {it}: g {g_loss.item():.3f} d {d_loss.item():.3f} info {info_loss.item():.3f}")
