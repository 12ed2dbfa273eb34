"""Soft actor-critic on a one-dimensional task: the actor acts on each new state under no_grad, the transitions
go into a replay buffer, and each update runs the actor under no_grad on the sampled next states to make the
critic's target. Those next states are also trained on as states: a target made from them is training, not an
evaluation of data the model has seen."""
import torch
import torch.nn as nn

torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
opt_a, opt_c = torch.optim.Adam(actor.parameters(), lr=1e-3), torch.optim.Adam(critic.parameters(), lr=1e-3)
buffer: list[tuple] = []


def policy(s):
    mean, log_std = actor(s).chunk(2, -1)
    dist = torch.distributions.Normal(mean, log_std.clamp(-4, 1).exp())
    a = dist.rsample()
    return torch.tanh(a), dist.log_prob(a).sum(-1, keepdim=True)


s = torch.zeros(2)
for t in range(1200):
    with torch.no_grad():
        a, _ = policy(s.unsqueeze(0))
    s_next = torch.stack([s[0] + 0.1 * a[0, 0], s[0]]).clamp(-2, 2)
    buffer.append((s, a[0], -s_next[0].abs(), s_next))
    s = s_next if t % 50 else torch.randn(2)
    if len(buffer) < 200:
        continue
    batch = [buffer[i] for i in torch.randint(0, len(buffer), (64,)).tolist()]
    bs, ba, br, bn = (torch.stack(x) for x in zip(*batch))
    with torch.no_grad():
        an, logp_n = policy(bn)
        target = br.unsqueeze(1) + 0.9 * (critic(torch.cat([bn, an], 1)) - 0.1 * logp_n)
    c_loss = nn.functional.mse_loss(critic(torch.cat([bs, ba], 1)), target)
    opt_c.zero_grad()
    c_loss.backward()
    opt_c.step()
    new_a, logp = policy(bs)
    a_loss = (0.1 * logp - critic(torch.cat([bs, new_a], 1))).mean()
    opt_a.zero_grad()
    a_loss.backward()
    opt_a.step()
print(f"critic loss {c_loss.item():.3f} actor loss {a_loss.item():.3f}")
