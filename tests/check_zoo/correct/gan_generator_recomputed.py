"""A GAN whose critic step runs the generator and detaches its output, and whose generator step runs the
generator again on the same noise. The first generator forward's graph is never backpropagated, but it is
a training input of the critic, not an evaluation forward; and the critic's loss is not meant to fall."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
points = torch.randn(960, 2) * torch.tensor([0.5, 1.5]) + torch.tensor([2.0, -1.0])
batches = DataLoader(TensorDataset(points), batch_size=12, shuffle=True)
gen = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
critic = nn.Sequential(nn.Linear(2, 6), nn.Tanh(), nn.Linear(6, 1))
bce = nn.BCEWithLogitsLoss()
opt_gen = torch.optim.Adam(gen.parameters(), lr=0.01)
opt_critic = torch.optim.Adam(critic.parameters(), lr=0.02)


def critic_step(real, noise):
    opt_critic.zero_grad()
    fake = gen(noise).detach()          # the generator runs here, its graph dropped
    real_score, fake_score = critic(real), critic(fake)
    err = bce(real_score, torch.ones_like(real_score)) + bce(fake_score, torch.zeros_like(fake_score))
    err.backward()
    opt_critic.step()
    return err.item()


def generator_step(noise):
    opt_gen.zero_grad()
    score = critic(gen(noise))          # ... and again here, with its graph
    err = bce(score, torch.ones_like(score))
    err.backward()
    opt_gen.step()
    return err.item()


for epoch in range(1):
    sums = [0.0, 0.0]
    for (real,) in batches:
        noise = torch.randn(real.shape[0], 3)
        sums[0] += critic_step(real, noise)
        sums[1] += generator_step(noise)
    print(f"epoch {epoch}: critic {sums[0] / len(batches):.3f} generator {sums[1] / len(batches):.3f}")
