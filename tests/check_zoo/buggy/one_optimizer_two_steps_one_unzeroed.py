# expect: missing-zero-grad
"""A VAE-GAN's decoder is stepped twice a batch by one optimizer: its reconstruction step, then its GAN step. Only
the GAN step is preceded by zero_grad(), so every reconstruction step also applies the gradients left over from
the previous batch's GAN step (half of the optimizer's steps are wrong, every one of them at one place)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.sigmoid(torch.randn(2048, 4) @ torch.randn(4, 32))
loader = DataLoader(TensorDataset(X), batch_size=64, shuffle=True)
enc = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
dec = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 32), nn.Sigmoid())
disc = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_vae = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-3)
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
for epoch in range(3):
    for (x,) in loader:
        # reconstruction step: the decoder's gradients from the last GAN step are still there
        recon = dec(enc(x))
        F.binary_cross_entropy(recon, x).backward()
        opt_vae.step()
        # discriminator step
        opt_d.zero_grad()
        fake = dec(torch.randn(64, 8)).detach()
        d_loss = F.binary_cross_entropy_with_logits(disc(x), torch.ones(len(x), 1)) + \
            F.binary_cross_entropy_with_logits(disc(fake), torch.zeros(64, 1))
        d_loss.backward()
        opt_d.step()
        # GAN step of the decoder
        opt_vae.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(disc(dec(torch.randn(64, 8))), torch.ones(64, 1))
        g_loss.backward()
        opt_vae.step()
print("done")
