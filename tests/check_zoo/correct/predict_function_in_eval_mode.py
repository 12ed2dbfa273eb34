"""Evaluation written as a plain function: predict(model, x) calls model.eval(), runs one forward on held-out
tensors (gradients left on) and turns the scores into classes; training switches back with model.train()."""
import torch
import torch.nn as nn
import torch.nn.functional as F
# info-ok: eval-without-no-grad

torch.manual_seed(0)
X = torch.randn(1500, 16)
y = (X[:, :4].sum(1) > 0).long()
x_train, y_train, x_test, y_test = X[:1200], y[:1200], X[1200:], y[1200:]
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def predict(model, x):
    model.eval()
    return model(x).argmax(1)


for epoch in range(5):
    model.train()
    perm = torch.randperm(1200)
    for i in range(0, 1200, 50):
        idx = perm[i:i + 50]
        optimizer.zero_grad()
        F.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
        optimizer.step()
    acc = (predict(model, x_test) == y_test).float().mean().item()
    print(f"epoch {epoch} test accuracy {acc:.3f}")
