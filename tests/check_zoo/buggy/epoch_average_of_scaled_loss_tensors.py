# expect: loss-retains-graph
"""The epoch's average is built from the loss tensor divided by the batch count (`total += loss / n`): the
loss variable is rebound every step, but its graph lives on inside the running total's."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1024, 20)
y = (X[:, 0] > 0).long()
loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    avg_loss = 0.0
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        avg_loss += loss / len(loader)
    print(f"epoch {epoch}: {float(avg_loss):.4f}")
