"""A GAN with the classic two-backward discriminator step: the discriminator's real and fake losses go to backward()
one after the other, errD = errD_real + errD_fake is kept for printing only, and its loss does not
go down (the generator is trained to raise it). Real samples come from a DataLoader."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
real_data = torch.randn(4096, 2) @ torch.tensor([[0.6, 0.2], [0.0, 1.5]]) + torch.tensor([1.0, -1.0])
loader = DataLoader(TensorDataset(real_data), batch_size=64, shuffle=True, drop_last=True)

gen = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
disc = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1),
                     nn.Sigmoid())
criterion = nn.BCELoss()
opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
REAL, FAKE = 1.0, 0.0
for epoch in range(4):
    for i, (real,) in enumerate(loader):
        # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
        disc.zero_grad()
        b = real.size(0)
        label = torch.full((b,), REAL)
        output = disc(real).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.randn(b, 8)
        fake = gen(noise)
        label.fill_(FAKE)
        output = disc(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        opt_d.step()
        # (2) update G: maximize log(D(G(z)))
        gen.zero_grad()
        label.fill_(REAL)
        output = disc(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        opt_g.step()
        if i % 20 == 0:
            print(f"[{epoch}][{i}] Loss_D {errD.item():.4f} Loss_G {errG.item():.4f} D(x) {D_x:.4f}")
