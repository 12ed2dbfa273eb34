# expect: nonfinite-input
"""Tabular data with missing values (NaN) fed straight to the model."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(0)
table = rng.normal(size=(1000, 6)).astype(np.float32)
target = (table[:, 0] * 2 - table[:, 3]).astype(np.float32)
table[rng.random(table.shape) < 0.02] = np.nan          # missing cells, as read from a CSV
ds = TensorDataset(torch.from_numpy(table), torch.from_numpy(target))
loader = DataLoader(ds, batch_size=50, shuffle=True)
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb).squeeze(1), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
