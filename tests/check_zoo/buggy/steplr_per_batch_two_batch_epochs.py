# expect: scheduler-stepped-per-batch
"""A StepLR sized in epochs (step_size=1: decay every epoch) stepped after every batch, on a data set of two
batches an epoch: the learning rate decays twice as often as meant, and is 1e-8 of its start after 8 epochs
instead of 1e-4."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
x = torch.randn(32, 8)
y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
for epoch in range(8):
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}, lr {sched.get_last_lr()[0]:.1e}")
