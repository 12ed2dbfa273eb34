# expect: eval-mode-missing
"""A segmentation net with BatchNorm, validated by a function that feeds the held-out images one at a time (batch
size 1, as whole-image validation often is) and forgets model.eval(): each forward normalises by that single
image's statistics and overwrites the running statistics, so the dice score is not the trained model's."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
images = torch.rand(72, 1, 24, 24)
masks = (images > 0.6).float()
train_x, train_y, val_x, val_y = images[:60], masks[:60], images[60:], masks[60:]


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.up = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 1, 1))

    def forward(self, x):
        return self.up(self.down(x))


def dice(pred, target):
    inter = (pred * target).sum()
    return (2 * inter + 1e-6) / (pred.sum() + target.sum() + 1e-6)


def validate(net, xs, ys):
    total = 0.0
    for x, y in zip(xs, ys):
        pred = (torch.sigmoid(net(x.unsqueeze(0))) > 0.5).float()
        total += dice(pred, y.unsqueeze(0)).item()
    return total / len(xs)


net = TinyUNet()
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    perm = torch.randperm(60)
    for i in range(0, 60, 4):
        idx = perm[i:i + 4]
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(train_x[idx]), train_y[idx])
        loss.backward()
        opt.step()
    print(f"epoch {epoch} val dice {validate(net, val_x, val_y):.3f}")
