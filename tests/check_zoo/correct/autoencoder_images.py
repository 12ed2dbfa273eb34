# Convolutional autoencoder on digits: sigmoid output + BCELoss (probabilities vs pixel intensities).
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
imgs = torch.tensor(load_digits().images, dtype=torch.float32).unsqueeze(1) / 16.0
loader = DataLoader(TensorDataset(imgs), batch_size=64, shuffle=True)

encoder = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 16))
decoder = nn.Sequential(nn.Linear(16, 64), nn.Sigmoid())
params = list(encoder.parameters()) + list(decoder.parameters())
opt = torch.optim.Adam(params, lr=3e-3)
bce = nn.BCELoss()
for epoch in range(6):
    for (xb,) in loader:
        recon = decoder(encoder(xb))
        loss = bce(recon, xb.flatten(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))
