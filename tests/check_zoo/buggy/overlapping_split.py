# expect: train-val-overlap
"""Index arithmetic slip: the validation slice starts inside the training slice."""
import torch
from torch import nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
perm = torch.randperm(len(X))
X, y = X[perm], y[perm]
n_train = int(0.8 * len(X))
X_train, y_train = X[:n_train], y[:n_train]
X_val, y_val = X[n_train - 300:], y[n_train - 300:]

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    idx = torch.randperm(n_train)
    for i in range(0, n_train, 64):
        b = idx[i:i + 64]
        opt.zero_grad()
        nn.functional.cross_entropy(model(X_train[b]), y_train[b]).backward()
        opt.step()
    with torch.no_grad():
        acc = (model(X_val).argmax(1) == y_val).float().mean().item()
    print(f"epoch {epoch} val acc {acc:.3f}")
