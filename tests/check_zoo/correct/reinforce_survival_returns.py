"""REINFORCE on a balancing task that pays +1 for every step the pole stays up (CartPole's reward): one backward()
per time step on -log_prob * return, one optimizer step per episode. As the policy learns, episodes get longer and
the returns larger, so the surrogate loss grows while training works: it is not a loss against targets."""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
rng = np.random.default_rng(0)


class Balance:
    """A drifting pole angle; action 0 pushes left, 1 right; the episode ends when |angle| > 1 (or at 60 steps)."""
    def reset(self):
        self.angle, self.vel, self.t = rng.normal(0, 0.05), 0.0, 0
        return self._obs()

    def _obs(self):
        return np.array([self.angle, self.vel], dtype=np.float32)

    def step(self, action):
        self.vel += 0.05 * self.angle + (0.03 if action == 1 else -0.03) + rng.normal(0, 0.01)
        self.angle += self.vel
        self.t += 1
        done = abs(self.angle) > 1.0 or self.t >= 60
        return self._obs(), 1.0, done


policy = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
env, gamma = Balance(), 0.99
lengths = []
for episode in range(250):
    state, log_probs, rewards, done = env.reset(), [], [], False
    while not done:
        dist = Categorical(logits=policy(torch.from_numpy(state)))
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        state, reward, done = env.step(int(action))
        rewards.append(reward)
    returns, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        returns.insert(0, g)
    optimizer.zero_grad()
    for log_prob, ret in zip(log_probs, returns):
        (-log_prob * ret).backward()
    optimizer.step()
    lengths.append(len(rewards))
    if episode % 50 == 49:
        print(f"episode {episode + 1}: mean length {np.mean(lengths[-50:]):.1f}")
