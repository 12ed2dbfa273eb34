# Imbalanced data balanced by a WeightedRandomSampler (each batch sees both classes equally).
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
y = (torch.rand(2400) < 0.06).long()
X = torch.randn(2400, 8) + 1.2 * y[:, None]
counts = torch.bincount(y).float()
weights = (1.0 / counts)[y]
loader = DataLoader(TensorDataset(X, y), batch_size=64,
                    sampler=WeightedRandomSampler(weights, num_samples=len(y), replacement=True))
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
