# expect: compare-values-not-indices
"""Digits MLP; the validation accuracy unpacks torch.max(outputs.data, 1) the wrong way round."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
train_loader = DataLoader(TensorDataset(X[:1400], y[:1400]), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(X[1400:], y[1400:]), batch_size=128)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for xb, yb in val_loader:
            outputs = model(xb)
            predicted, _ = torch.max(outputs.data, 1)
            correct += (predicted == yb).sum().item()
            total += yb.size(0)
    print(f"epoch {epoch} loss {loss.item():.3f} val acc {100 * correct / total:.1f}%")
