# expect: eval-mode-missing
"""Evaluation written as a plain function that forgets model.eval(): predict(model, x) runs a forward on held-out
tensors with gradients on and Dropout still active, so the test accuracy is measured on a random sub-network."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1500, 16)
y = (X[:, :4].sum(1) > 0).long()
x_train, y_train, x_test, y_test = X[:1200], y[:1200], X[1200:], y[1200:]
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def predict(model, x):
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
