# expect: no-gradient-flow
"""An actor-critic whose forward() is never used: act() and evaluate() call its heads directly, as many PPO
programs do. Its constructor also builds a layer that no method ever calls, so the optimizer holds parameters
that never receive a gradient. That layer changes nothing the policy computes, so it is an info hint (a layer
that runs in the forward and gets no gradient is the warning: detached_features.py)."""
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.Linear(4, 64)  # never used
        self.action_layer = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
        self.value_layer = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self):
        raise NotImplementedError

    def act(self, state):
        dist = Categorical(logits=self.action_layer(state))
        action = dist.sample()
        return action, dist.log_prob(action)

    def evaluate(self, state, action):
        dist = Categorical(logits=self.action_layer(state))
        return dist.log_prob(action), self.value_layer(state).squeeze(-1), dist.entropy()


policy = ActorCritic()
optimizer = torch.optim.Adam(policy.parameters(), lr=2e-3)
for update in range(40):
    states = torch.randn(128, 4)
    with torch.no_grad():
        actions, old_logprobs = policy.act(states)
    rewards = ((states[:, 0] > 0).long() == actions).float()
    for epoch in range(3):
        logprobs, values, entropy = policy.evaluate(states, actions)
        advantages = rewards - values.detach()
        ratio = (logprobs - old_logprobs).exp()
        loss = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages).mean() \
            + 0.5 * ((values - rewards) ** 2).mean() - 0.01 * entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("done")
