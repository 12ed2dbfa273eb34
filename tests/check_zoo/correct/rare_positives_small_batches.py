"""Fraud-style detection: 3% positives, shuffled batches of 8, a class-weighted cross-entropy. Most batches hold
only negatives because positives are rare, not because the data is ordered: shuffling cannot change that."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

g = torch.Generator().manual_seed(0)
n = 2400
y = (torch.rand(n, generator=g) < 0.03).long()
X = torch.randn(n, 12, generator=g) + 1.5 * y[:, None] * torch.linspace(-1, 1, 12)
X_train, y_train, X_val, y_val = X[:2000], y[:2000], X[2000:], y[2000:]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
rate = y_train.float().mean()
criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, float((1 - rate) / rate)]))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(X_train, y_train), batch_size=8, shuffle=True)
for epoch in range(3):
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(X_val).argmax(1)
    tp = int(((pred == 1) & (y_val == 1)).sum())
    print(f"epoch {epoch}: recall {tp / max(1, int(y_val.sum())):.2f}, flagged {int(pred.sum())} of {len(y_val)}")
