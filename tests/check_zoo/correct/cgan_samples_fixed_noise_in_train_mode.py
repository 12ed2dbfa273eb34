"""A conditional GAN whose generator has BatchNorm and Dropout. Every 20 steps it draws images from a fixed batch
of noise under no_grad, still in train mode, to log them, as many GAN programs do: sampling, not an evaluation of
held-out data, so no validation number is made wrong."""
import torch
import torch.nn as nn

torch.manual_seed(0)
Z, C = 16, 4
real_x = torch.randn(1024, 32) * 0.3 + torch.repeat_interleave(torch.eye(C), 8, dim=1).repeat(256, 1)
real_y = torch.arange(C).repeat(256)
G = nn.Sequential(nn.Linear(Z + C, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 32))
D = nn.Sequential(nn.Linear(32 + C, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters(), lr=2e-4), torch.optim.Adam(D.parameters(), lr=2e-4)
bce = nn.BCEWithLogitsLoss()
ref_noise = torch.randn(16, Z)
ref_labels = nn.functional.one_hot(torch.arange(16) % C, C).float()
logged = []
for step in range(160):
    idx = torch.randint(0, len(real_x), (64,))
    x, y = real_x[idx], nn.functional.one_hot(real_y[idx], C).float()
    fake = G(torch.cat([torch.randn(64, Z), y], 1))
    d_loss = bce(D(torch.cat([x, y], 1)), torch.ones(64, 1)) + bce(D(torch.cat([fake.detach(), y], 1)), torch.zeros(64, 1))
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = bce(D(torch.cat([fake, y], 1)), torch.ones(64, 1))
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    if step % 20 == 0:
        with torch.no_grad():
            logged.append(G(torch.cat([ref_noise, ref_labels], 1)))  # images for the log
print(f"d_loss {d_loss.item():.3f} g_loss {g_loss.item():.3f}, {len(logged)} sample grids logged")
