"""Advantage actor-critic on a two-armed contextual bandit: the policy loss -log_prob * advantage plus a value
loss mse(value, return) in one backward; the advantage is detached. The total is not a loss against fixed targets."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

torch.manual_seed(0)


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 32), nn.ReLU())
        self.pi = nn.Linear(32, 2)
        self.v = nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h), self.v(h).squeeze(-1)


net = ActorCritic()
opt = torch.optim.RMSprop(net.parameters(), lr=3e-3)
for it in range(300):
    ctx = torch.randn(16, 4)
    logits, value = net(ctx)
    dist = Categorical(logits=logits)
    action = dist.sample()
    best = (ctx[:, 0] > 0).long()
    reward = (action == best).float() + 0.1 * torch.randn(16)
    advantage = (reward - value).detach()
    loss = -(dist.log_prob(action) * advantage).mean() + 0.5 * F.mse_loss(value, reward) - 0.01 * dist.entropy().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("ok")
