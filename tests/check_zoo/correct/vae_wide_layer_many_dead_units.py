# info-ok: dead-relu
"""A VAE whose 400-unit ReLU layers leave most units at zero on sparse binary images while its loss falls steadily:
many dead units in a wide layer cost capacity the model does not need, not the training."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
# sparse binary "images": a few active pixels drawn from 8 prototypes
protos = (torch.rand(8, 196) < 0.08).float()
idx = torch.randint(0, 8, (3072,))
X = (protos[idx] * (torch.rand(3072, 196) < 0.9).float())
loader = DataLoader(TensorDataset(X), batch_size=128, shuffle=True)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(196, 400)
        self.fc21 = nn.Linear(400, 8)
        self.fc22 = nn.Linear(400, 8)
        self.fc3 = nn.Linear(8, 400)
        self.fc4 = nn.Linear(400, 196)
        with torch.no_grad():  # a layer whose units mostly start below zero (as after a few steps at a high lr)
            self.fc1.bias.fill_(-0.35)
            self.fc3.bias.fill_(-1.2)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(5):
    total = 0.0
    for (x,) in loader:
        recon, mu, logvar = model(x)
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / len(X):.2f}")
