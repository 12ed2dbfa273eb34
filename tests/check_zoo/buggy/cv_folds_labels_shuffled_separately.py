# expect: loss-not-decreasing
"""5-fold cross-validation, a new model and optimizer per fold, and in every fold the features and the labels
are shuffled with two different permutations: no fold can learn, so the search's answer means nothing."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
folds = torch.arange(len(X)) % 5
for k in range(5):
    Xtr, ytr = X[folds != k], y[folds != k]
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        Xtr = Xtr[torch.randperm(len(Xtr))]
        ytr = ytr[torch.randperm(len(ytr))]
        for i in range(0, len(Xtr), 64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(Xtr[i:i + 64]), ytr[i:i + 64])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(X[folds == k]).argmax(1) == y[folds == k]).float().mean().item()
    print(f"fold {k}: accuracy {acc:.3f}")
