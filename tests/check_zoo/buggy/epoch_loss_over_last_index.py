# expect: loss-average-wrong-count
"""The epoch loss is the sum of the batches' mean losses divided by `i`, the last index that enumerate() gave:
one less than the number of batches, so every epoch's printed loss is too large (by 1/9 here)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(400, 8)
y = (X[:, 0] - X[:, 1] > 0).long()
loader = DataLoader(TensorDataset(X, y), batch_size=40, shuffle=True)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    epoch_loss = 0.0
    for i, (xb, yb) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        epoch_loss += loss.item()
    print("Epoch finished! Loss: {}".format(epoch_loss / i))
