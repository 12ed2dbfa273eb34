# expect: train-mode-missing
"""model.train() is called once before the loop; evaluate() switches to eval and nothing switches back."""
import torch
from torch import nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = (torch.tensor(X, dtype=torch.float32) - 4.9) / 6.0
y = torch.tensor(y)
Xtr, ytr, Xva, yva = X[:1500], y[:1500], X[1500:], y[1500:]

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def evaluate():
    model.eval()
    with torch.no_grad():
        return (model(Xva).argmax(1) == yva).float().mean().item()


model.train()
for epoch in range(4):
    perm = torch.randperm(1500)
    for i in range(0, 1500, 100):
        idx = perm[i:i + 100]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(Xtr[idx]), ytr[idx])
        loss.backward()
        optimizer.step()
    print(epoch, evaluate())
