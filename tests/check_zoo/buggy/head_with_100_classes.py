# expect: output-classes-mismatch
"""A CNN head copied from a CIFAR-100 script, used on 10-class digits."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
d = load_digits()
x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
t = torch.tensor(d.target)
loader = DataLoader(TensorDataset(x, t), batch_size=64, shuffle=True)


class SmallCNN(nn.Module):
    def __init__(self, num_classes=100):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(torch.flatten(x, 1))


model = SmallCNN()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
