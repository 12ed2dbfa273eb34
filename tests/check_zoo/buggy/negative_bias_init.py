# expect: dead-relu
"""A custom init that (by a sign slip) starts every hidden bias at a large negative value."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1500, 20)
y = (X[:, 0] + X[:, 1] > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 2)
        self.reset()

    def reset(self):
        nn.init.xavier_uniform_(self.fc1.weight)
        nn.init.constant_(self.fc1.bias, -4.0)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(X, y), batch_size=50, shuffle=True)
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
