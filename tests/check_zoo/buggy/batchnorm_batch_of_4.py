# expect: bn-small-batch
"""A conv net with a BatchNorm1d on its flat features, trained with batch_size=4: each feature's mean and
variance come from 4 values."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
d = load_digits()
x = torch.tensor(d.images[:600], dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
t = torch.tensor(d.target[:600])
loader = DataLoader(TensorDataset(x, t), batch_size=4, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(8 * 16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(2):
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
