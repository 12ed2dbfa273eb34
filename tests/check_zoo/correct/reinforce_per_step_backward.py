"""REINFORCE on a small corridor world: one backward() per time step (-log_prob * return), one optimizer step per
episode. The objective is a policy-gradient surrogate, not a loss against targets: its value follows the returns
and is not supposed to go down."""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

rng = np.random.default_rng(0)
torch.manual_seed(0)


class Corridor:
    """Walk right from cell 0 to cell 7; each step costs -0.1, the goal pays +1."""
    def reset(self):
        self.pos = 0
        return self._obs()

    def _obs(self):
        o = np.zeros(8, dtype=np.float32)
        o[self.pos] = 1.0
        return o

    def step(self, action):
        self.pos = min(7, max(0, self.pos + (1 if action == 1 else -1)))
        done = self.pos == 7
        return self._obs(), (1.0 if done else -0.1), done


policy = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
env, gamma = Corridor(), 0.95
for episode in range(120):
    state, log_probs, rewards = env.reset(), [], []
    for t in range(40):
        dist = Categorical(logits=policy(torch.from_numpy(state)))
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        state, reward, done = env.step(int(action))
        rewards.append(reward)
        if done:
            break
    returns, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        returns.insert(0, g)
    optimizer.zero_grad()
    for log_prob, ret in zip(log_probs, returns):
        loss = -log_prob * ret          # one backward per time step; the gradients add up
        loss.backward()
    optimizer.step()
    if episode % 40 == 0:
        print(f"episode {episode} length {len(rewards)}")
