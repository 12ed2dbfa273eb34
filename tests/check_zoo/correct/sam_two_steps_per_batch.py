"""Sharpness-aware minimisation written as an optimizer with two steps per batch: first_step moves to the worst
nearby weights (e.w), a second forward/backward there, second_step restores the weights and applies the base
optimizer's update."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        norm = torch.norm(torch.stack([p.grad.norm(2) for g in self.param_groups for p in g["params"]
                                       if p.grad is not None]), 2)
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                e_w = p.grad * scale
                p.add_(e_w)
                self.state[p]["e_w"] = e_w
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.sub_(self.state[p]["e_w"])
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    def step(self, closure=None):
        raise NotImplementedError("SAM needs first_step and second_step")


torch.manual_seed(0)
X = torch.randn(1600, 20)
y = (X[:, :3].sum(1) > 0).long()
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.05, momentum=0.9)
for epoch in range(4):
    total = 0.0
    for xb, yb in loader:
        F.cross_entropy(model(xb), yb).backward()
        optimizer.first_step(zero_grad=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.second_step(zero_grad=True)
        total += loss.item() * len(xb)
    print(f"epoch {epoch} loss {total / len(X):.4f}")
