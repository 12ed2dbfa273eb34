# info-ok: no-gradient-flow
"""BYOL-style self-supervised training: features taken by a forward hook before the backbone's classification
head (whose output is thrown away, so its parameters never get a gradient, by design), a projector built on the
first forward and assigned as an attribute then, a target network (a deepcopy, BatchNorm in train mode) run
under no_grad whose output is the target of a loss written by hand (2 - 2 cos), updated by EMA."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, _ = load_digits(return_X_y=True)
images = torch.tensor(X / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)


def augment(x):
    return (x + 0.1 * torch.randn_like(x)) * (0.8 + 0.4 * torch.rand(x.shape[0], 1, 1, 1))


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, 10)  # the supervised head: unused by self-supervised training

    def forward(self, x):
        return self.fc(self.features(x))


class NetWrapper(nn.Module):
    def __init__(self, net, layer):
        super().__init__()
        self.net, self.projector, self.hidden = net, None, None
        layer.register_forward_hook(self._keep)

    def _keep(self, _, __, output):
        self.hidden = output

    def forward(self, x):
        _ = self.net(x)  # only for the hook: the head's output is thrown away
        rep, self.hidden = self.hidden, None  # (a deepcopy of this wrapper must not meet a non-leaf tensor)
        if self.projector is None:
            self.projector = nn.Sequential(nn.Linear(rep.shape[1], 64), nn.BatchNorm1d(64), nn.ReLU(),
                                           nn.Linear(64, 32))
        return self.projector(rep)


def byol_loss(x, y):
    x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    return 2 - 2 * (x * y).sum(dim=-1)


backbone = Backbone()
online = NetWrapper(backbone, backbone.features)
online(images[:2])  # builds the projector before the optimizer is made
predictor = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32))
target = copy.deepcopy(online)
for p in target.parameters():
    p.requires_grad = False
params = list(online.parameters()) + list(predictor.parameters())
optimizer = torch.optim.Adam(params, lr=3e-3)

for step in range(40):
    batch = images[torch.randint(0, len(images), (64,))]
    one, two = augment(batch), augment(batch)
    p_one, p_two = predictor(online(one)), predictor(online(two))
    with torch.no_grad():
        t_one, t_two = target(one), target(two)
    loss = (byol_loss(p_one, t_two.detach()) + byol_loss(p_two, t_one.detach())).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for pt, po in zip(target.parameters(), online.parameters()):
            pt.mul_(0.99).add_(po, alpha=0.01)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
