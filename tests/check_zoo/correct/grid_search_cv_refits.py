"""A hand-written grid search with 3-fold cross-validation: every (setting, fold) pair trains a new model with a
new optimizer, and the best setting is kept. Some settings train badly on purpose (that is what the search is
for), and every fit starts again from a high loss: the run's losses, read as one curve, rise and fall."""
import itertools

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import KFold

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X[:900] / 16.0, dtype=torch.float32)
y = torch.tensor(y[:900])


def fit(hidden, lr, train_idx, epochs=6):
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=g)]
        for i in range(0, len(order), 32):
            b = order[i:i + 32]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(X[b]), y[b])
            loss.backward()
            opt.step()
    return model


def score(model, idx):
    model.eval()
    with torch.no_grad():
        return (model(X[idx]).argmax(1) == y[idx]).float().mean().item()


results = {}
folds = list(KFold(n_splits=3, shuffle=True, random_state=0).split(X))
for hidden, lr in itertools.product([2, 32], [0.5, 0.02]):
    accs = [score(fit(hidden, lr, torch.tensor(tr)), torch.tensor(te)) for tr, te in folds]
    results[(hidden, lr)] = sum(accs) / len(accs)
    print(f"hidden={hidden} lr={lr}: cv accuracy {results[(hidden, lr)]:.3f}")
best = max(results, key=results.get)
print("best setting", best, f"{results[best]:.3f}")
