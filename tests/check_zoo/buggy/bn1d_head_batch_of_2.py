# expect: bn-small-batch
"""A conv net trained on 32x32 images two at a time: its BatchNorm2d is fine (2 x 32 x 32 values per channel),
but the head normalizes its 16 features with a BatchNorm1d, whose statistics come from the 2 samples of
each batch."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)
n = 240
kind = torch.randint(0, 2, (n,))
grid = torch.linspace(-1, 1, 32)
ramp = grid.view(1, 1, 32, 1).expand(n, 1, 32, 32)           # brighter towards the bottom ...
ramp = torch.where(kind.view(n, 1, 1, 1) == 1, ramp, -ramp)    # ... or towards the top
pictures = ramp.repeat(1, 3, 1, 1) + 0.3 * torch.randn(n, 3, 32, 32)
train = DataLoader(TensorDataset(pictures[:200], kind[:200]), batch_size=2, shuffle=True, drop_last=True)
held_out = DataLoader(TensorDataset(pictures[200:], kind[200:]), batch_size=20)


class SmallConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.norm = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4 * 4, 16)
        self.feature_norm = nn.BatchNorm1d(16)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        x = F.relu(self.norm(self.conv(x)))
        x = F.adaptive_avg_pool2d(x, 4).flatten(1)
        return self.out(F.relu(self.feature_norm(self.fc(x))))


model = SmallConv()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(1):
    model.train()
    for x, y in train:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    right = 0
    with torch.no_grad():
        for x, y in held_out:
            right += (model(x).argmax(1) == y).sum().item()
    print("epoch", epoch, "held-out accuracy", right / 40)
