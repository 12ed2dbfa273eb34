"""Single-process run of DDP-style data code: DistributedSampler with set_epoch every epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
X = torch.randn(800, 10)
y = (X[:, 0] - X[:, 1] > 0).long()
ds = TensorDataset(X, y)
sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
loader = DataLoader(ds, batch_size=32, sampler=sampler)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(4):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
