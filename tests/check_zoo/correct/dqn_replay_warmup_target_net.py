# info-ok: eval-without-no-grad
# info-ok: dead-relu
"""DQN with epsilon-greedy actions (eps 0.1): 2,500 transitions collected with about 2,250 forwards and no
optimizer step before the first update (a replay buffer's warm-up), a target network held out of the optimizer on purpose and synced every 50 updates, a TD target built
from the target network's output under no_grad, and smooth_l1 between Q(s, a) and that target."""
import random
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)


class Chain:
    """Six states in a row; action 1 moves right, 0 left; reaching the right end pays 1."""
    def reset(self):
        self.s = 0
        return self._obs()

    def _obs(self):
        o = np.zeros(6, dtype=np.float32)
        o[self.s] = 1
        return o

    def step(self, a):
        self.s = max(0, min(5, self.s + (1 if a == 1 else -1)))
        return self._obs(), float(self.s == 5), self.s == 5


def make_q():
    return nn.Sequential(nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 2))


q_net, target_net = make_q(), make_q()
target_net.load_state_dict(q_net.state_dict())
optimizer = torch.optim.Adam(q_net.parameters(), lr=1e-3)
buffer = deque(maxlen=10_000)
env, state, eps = Chain(), Chain().reset(), 0.1
env.reset()
for t in range(3_000):
    if random.random() < eps:
        action = random.randrange(2)
    else:
        action = int(q_net(torch.from_numpy(state)).argmax())
    nxt, reward, done = env.step(action)
    buffer.append((state, action, reward, nxt, done))
    state = env.reset() if done else nxt
    if len(buffer) < 2_500:
        continue
    batch = random.sample(buffer, 32)
    s, a, r, s2, d = (torch.as_tensor(np.array(x)) for x in zip(*batch))
    q = q_net(s).gather(1, a.long().unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        target = r.float() + 0.9 * target_net(s2).max(1)[0] * (1 - d.float())
    loss = F.smooth_l1_loss(q, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if t % 50 == 0:
        target_net.load_state_dict(q_net.state_dict())
print("done", len(buffer))
