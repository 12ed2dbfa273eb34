"""A GAN written as in the DCGAN example: the discriminator's real and fake losses go to backward()
one after the other, errD = errD_real + errD_fake is kept for printing only, and its loss does not
go down (the generator is trained to raise it). Real samples come from a DataLoader."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
real_data = torch.randn(4096, 2) @ torch.tensor([[0.6, 0.2], [0.0, 1.5]]) + torch.tensor([1.0, -1.0])
loader = DataLoader(TensorDataset(real_data), batch_size=64, shuffle=True, drop_last=True)

netG = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
netD = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1),
                     nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0
for epoch in range(4):
    for i, (real,) in enumerate(loader):
        # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        b = real.size(0)
        label = torch.full((b,), real_label)
        output = netD(real).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.randn(b, 8)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()
        # (2) update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        if i % 20 == 0:
            print(f"[{epoch}][{i}] Loss_D {errD.item():.4f} Loss_G {errG.item():.4f} D(x) {D_x:.4f}")
