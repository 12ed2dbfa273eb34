# info-ok: eval-without-no-grad
"""DQN on a continuous random walk with a Q-network that has Dropout: each action is chosen by a forward on one
state (gradients on, no backward, the net in train mode), and the updates later sample those states from the
replay buffer. The action forwards are not an evaluation: their rows are what the optimizer trains on."""
import random
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)


class Walk:
    def reset(self):
        self.x = np.random.uniform(-1, 1, size=4).astype(np.float32)
        self.t = 0
        return self.x.copy()

    def step(self, a):
        self.x = (self.x + (0.1 if a == 1 else -0.1) + np.random.normal(0, 0.05, 4)).astype(np.float32)
        self.t += 1
        reward = float(-abs(self.x.sum()))
        return self.x.copy(), reward, self.t >= 20


q = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))
target = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))
target.load_state_dict(q.state_dict())
opt = torch.optim.Adam(q.parameters(), lr=1e-3)
buffer = deque(maxlen=5000)
env = Walk()
updates = 0
for episode in range(40):
    s, done, ret = env.reset(), False, 0.0
    while not done:
        if random.random() < 0.1:
            a = random.randrange(2)
        else:
            a = int(q(torch.from_numpy(s).unsqueeze(0)).argmax(1).item())
        s2, r, done = env.step(a)
        buffer.append((s, a, r, s2, done))
        s, ret = s2, ret + r
        if len(buffer) >= 64 and env.t % 2 == 0:
            batch = random.sample(list(buffer), 32)
            bs = torch.tensor(np.stack([b[0] for b in batch]))
            ba = torch.tensor([b[1] for b in batch])
            br = torch.tensor([b[2] for b in batch], dtype=torch.float32)
            bs2 = torch.tensor(np.stack([b[3] for b in batch]))
            bd = torch.tensor([b[4] for b in batch], dtype=torch.float32)
            with torch.no_grad():
                tq = br + 0.9 * (1 - bd) * target(bs2).max(1).values
            loss = F.smooth_l1_loss(q(bs).gather(1, ba.unsqueeze(1)).squeeze(1), tq)
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
            if updates % 50 == 0:
                target.load_state_dict(q.state_dict())
    if episode % 10 == 0:
        print(f"episode {episode} return {ret:.2f}")
