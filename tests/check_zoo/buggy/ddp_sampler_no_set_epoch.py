# expect: sampler-epoch-not-set
"""DDP-ready data code run on one process; set_epoch is never called."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.manual_seed(0)
X = torch.randn(640, 12)
y = (X[:, 0] > 0).long()
ds = TensorDataset(X, y)
sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
loader = DataLoader(ds, batch_size=32, sampler=sampler)
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(4):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
