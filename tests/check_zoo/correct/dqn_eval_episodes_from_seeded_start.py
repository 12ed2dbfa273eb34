"""A DQN on a small deterministic environment whose episodes all start from the same state (a seeded reset), and
whose greedy evaluation episodes run every 100 steps. The states an evaluation visits are states training has
visited (the start, and the first moves a greedy policy shares with an epsilon-greedy one): in reinforcement
learning that is how the environment is, not a validation set that leaked into the training data."""
import random

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
random.seed(0)
np.random.seed(0)


class Line:
    """Move a point on [-1, 1] to the goal at 0.6; 15 moves an episode; the same start every time."""

    def reset(self):
        self.x, self.v, self.t = -0.5, 0.0, 0
        return np.array([self.x, self.v], dtype=np.float32)

    def step(self, action: int):
        self.v = 0.8 * self.v + (0.05 if action == 1 else -0.05)
        self.x = float(np.clip(self.x + self.v, -1, 1))
        self.t += 1
        reward = -abs(self.x - 0.6)
        return np.array([self.x, self.v], dtype=np.float32), reward, self.t >= 15


q_net = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 2))
target_net = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 2))
target_net.load_state_dict(q_net.state_dict())
opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
buffer: list[tuple] = []


def act(state, epsilon: float) -> int:
    if random.random() < epsilon:
        return random.randrange(2)
    with torch.no_grad():
        return int(q_net(torch.as_tensor(state).unsqueeze(0)).argmax(1))


def evaluate() -> float:
    env, total = Line(), 0.0
    s, done = env.reset(), False
    while not done:
        s, r, done = env.step(act(s, 0.0))
        total += r
    return total


env, steps = Line(), 0
for episode in range(60):
    s, done = env.reset(), False
    while not done:
        a = act(s, max(0.05, 1.0 - steps / 300))
        s2, r, done = env.step(a)
        buffer.append((s, a, r, s2, done))
        s = s2
        if len(buffer) < 64:
            continue
        batch = random.sample(buffer, 32)
        bs, ba, br, bs2, bd = (torch.as_tensor(np.array(x)) for x in zip(*batch))
        with torch.no_grad():
            target = br.float() + 0.95 * target_net(bs2).max(1).values * (1 - bd.float())
        q = q_net(bs).gather(1, ba.long().unsqueeze(1)).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps % 50 == 0:
            target_net.load_state_dict(q_net.state_dict())
        if steps % 100 == 0:
            print(f"step {steps}: evaluation return {evaluate():.2f}")
