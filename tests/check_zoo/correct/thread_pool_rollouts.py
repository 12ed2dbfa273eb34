"""Evolution strategies with a thread pool: each member of the population is a deep copy of the policy with
jittered weights, and four threads play their episodes at the same time. Their forwards interleave (torch
releases the GIL inside each operation), so one thread's layers run while another thread's model is half-way
through its own forward: concurrent forwards, not layers of one model calling another's. The policy is then
fitted to the rewarded actions in the best member's states with a supervised step, so the run also trains."""
import copy
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
target_dir = torch.randn(16)


def play(member: nn.Module, seed: int) -> tuple[float, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(40, 16, generator=g)
    actions = []
    with torch.no_grad():
        for s in states:  # one state at a time, as an environment gives them
            actions.append(member(s.unsqueeze(0)).argmax(-1))
    acts = torch.cat(actions)
    reward = float(((states @ target_dir > 0).long() == acts).float().mean())
    return reward, states, acts


def jittered(seed: int) -> nn.Module:
    member = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for p in member.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return member


with ThreadPoolExecutor(max_workers=4) as pool:
    for generation in range(12):
        members = [jittered(generation * 8 + i) for i in range(8)]
        results = list(pool.map(play, members, range(generation * 8, generation * 8 + 8)))
        best = max(range(len(results)), key=lambda i: results[i][0])
        _, states, _ = results[best]
        right = (states @ target_dir > 0).long()  # the actions that would have been rewarded in those states
        for _ in range(5):
            loss = nn.functional.cross_entropy(policy(states), right)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"generation {generation}: best reward {results[best][0]:.2f}, fit loss {loss.item():.3f}")
