# expect: eval-mode-missing
"""Validation loop without model.eval() and without torch.no_grad() (BatchNorm keeps updating)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
train_loader = DataLoader(TensorDataset(X[:1400], y[:1400]), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(X[1400:], y[1400:]), batch_size=64)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.body(x)


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for xb, yb in train_loader:
        opt.zero_grad()
        loss = criterion(net(xb), yb)
        loss.backward()
        opt.step()
    val_loss = 0.0
    for xb, yb in val_loader:
        val_loss += criterion(net(xb), yb).item()
    print(epoch, val_loss / len(val_loader))
