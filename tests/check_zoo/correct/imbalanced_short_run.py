# info-ok: label-imbalance
"""Thirty steps on data where most samples are class 0 and class 2 is 40 times rarer, as a quick smoke run of a longer
training does: the model still predicts the common classes everywhere, which is where every model starts on
imbalanced data, not something this run has learned (only a longer run can show the rare class being ignored)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
n = 3000
u = torch.rand(n)
y = (u < 0.12).long() + (u < 0.02).long()  # class 0 most of the time, class 2 the rare one
x = torch.randn(n, 12) + nn.functional.one_hot(y, 3).float().repeat(1, 4) * 0.3
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
perm = torch.randperm(n)
for step in range(30):
    idx = perm[step * 100:(step + 1) * 100]
    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"after 30 steps: loss {loss.item():.3f}")
