# expect: loss-average-wrong-count
"""A regression whose epoch loss adds loss x batch size (a per-sample sum) and divides it by len(loader), the
number of batches: every printed epoch loss is 20 times (the batch size) too large."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(2)
xs = torch.rand(600, 3) * 2 - 1
ys = (xs[:, :1] * 1.5 - xs[:, 1:2] * xs[:, 2:3] + 0.5)
loader = DataLoader(TensorDataset(xs, ys), batch_size=20, shuffle=True)
regressor = nn.Sequential(nn.Linear(3, 24), nn.Tanh(), nn.Linear(24, 1))
optim = torch.optim.Adam(regressor.parameters(), lr=3e-3)
history = []
for epoch in range(3):
    total = 0.0
    for inputs, wanted in loader:
        optim.zero_grad()
        loss = F.mse_loss(regressor(inputs), wanted)
        loss.backward()
        optim.step()
        total += loss.item() * inputs.size(0)
    history.append(total / len(loader))
    print("epoch", epoch, "mse", history[-1])
