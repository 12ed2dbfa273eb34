# expect: eval-mode-missing
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1200, 16)
y = (X[:, :4].sum(1) > 0).long()
train = DataLoader(TensorDataset(X[:1000], y[:1000]), batch_size=50, shuffle=True)
val = DataLoader(TensorDataset(X[1000:], y[1000:]), batch_size=100)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 2))

    def forward(self, x):
        return self.net(x)


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
crit = nn.CrossEntropyLoss()
for epoch in range(3):
    model.train()
    for xb, yb in train:
        opt.zero_grad()
        crit(model(xb), yb).backward()
        opt.step()
    correct = 0
    with torch.no_grad():
        for xb, yb in val:
            correct += (model(xb).argmax(1) == yb).sum().item()
    print(f"epoch {epoch}: val acc {correct / 200:.3f}")
