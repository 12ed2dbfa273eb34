"""BYOL as one module: online encoder and predictor, a target network made by deepcopy on the first forward
(BatchNorm in train mode, run under no_grad inside BYOL.forward), the loss written by hand."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, _ = load_digits(return_X_y=True)
images = torch.tensor(X / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)


def mlp(d_in):
    return nn.Sequential(nn.Linear(d_in, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32))


def byol_loss(x, y):
    x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    return 2 - 2 * (x * y).sum(dim=-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.projector = mlp(16)

    def forward(self, x):
        return self.projector(self.net(x))


class BYOL(nn.Module):
    def __init__(self):
        super().__init__()
        self.online = Encoder()
        self.predictor = mlp(32)
        self.target = None
        self.forward(torch.randn(2, 1, 8, 8))  # builds the target network

    def forward(self, x):
        one = x + 0.1 * torch.randn_like(x)
        two = x * (0.8 + 0.4 * torch.rand(x.shape[0], 1, 1, 1))
        both = torch.cat((one, two))
        pred_one, pred_two = self.predictor(self.online(both)).chunk(2)
        with torch.no_grad():
            if self.target is None:
                self.target = copy.deepcopy(self.online)
                for p in self.target.parameters():
                    p.requires_grad = False
            proj = self.target(both).detach()
            t_one, t_two = proj.chunk(2)
        return (byol_loss(pred_one, t_two.detach()) + byol_loss(pred_two, t_one.detach())).mean()


learner = BYOL()
optimizer = torch.optim.Adam(learner.parameters(), lr=3e-3)
for step in range(40):
    loss = learner(images[torch.randint(0, len(images), (64,))])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for pt, po in zip(learner.target.parameters(), learner.online.parameters()):
            pt.mul_(0.99).add_(po, alpha=0.01)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
