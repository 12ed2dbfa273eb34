"""PPO in the cleanrl style: a rollout of 256 states collected under torch.no_grad() (actions, log-probs, values),
then 4 epochs of minibatch updates on exactly those states with the clipped surrogate and a value loss. The
states are scored before they are trained on: a rollout, not a validation set that leaks into training."""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
rng = np.random.default_rng(0)


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))

    def get_action_and_value(self, x, action=None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x).squeeze(-1)


def reward_of(obs, action):
    return float((obs[0] > 0) == (action == 1))


agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
for update in range(6):
    obs = torch.tensor(rng.normal(size=(256, 4)), dtype=torch.float32)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    rewards = torch.tensor([reward_of(o, int(a)) for o, a in zip(obs, actions)])
    advantages = rewards - values
    returns = rewards
    for epoch in range(4):
        for idx in torch.randperm(256).split(64):
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs[idx], actions[idx])
            ratio = (newlogprob - logprobs[idx]).exp()
            adv = (advantages[idx] - advantages[idx].mean()) / (advantages[idx].std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * ((newvalue - returns[idx]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    print(f"update {update}: mean reward {rewards.mean():.2f}")
