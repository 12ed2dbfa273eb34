# expect: loss-average-wrong-count
"""Training on 80% of a data set drawn by a SubsetRandomSampler (the rest is held out), and the epoch's loss is
the sum of loss x batch size divided by len(loader.dataset): the whole data set, not the 80% the sampler drew,
so every printed epoch loss is 20% too low."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

torch.manual_seed(7)
inputs = torch.randn(500, 8)
targets = inputs @ torch.linspace(-1, 1, 8) + 0.1 * torch.randn(500)
data = TensorDataset(inputs, targets.unsqueeze(1))
order = torch.randperm(500).tolist()
train_loader = DataLoader(data, batch_size=25, sampler=SubsetRandomSampler(order[:400]))
held_out_loader = DataLoader(data, batch_size=100, sampler=order[400:])

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
criterion = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(4):
    model.train()
    running = 0.0
    for x, y in train_loader:
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.item() * x.size(0)
    train_loss = running / len(train_loader.dataset)
    model.eval()
    with torch.no_grad():
        held = sum(criterion(model(x), y).item() * len(x) for x, y in held_out_loader) / 100
    print(f"epoch {epoch}: train loss {train_loss:.4f}  held-out loss {held:.4f}")
