"""Digits MLP; validation reports top-1/top-3 accuracy and the mean confidence (max softmax value)."""
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
    top1 = top3 = conf_sum = 0.0
    with torch.no_grad():
        for xb, yb in val_loader:
            outputs = model(xb)
            _, predicted = torch.max(outputs, 1)
            top1 += (predicted == yb).sum().item()
            _, best3 = outputs.topk(3, dim=1)
            top3 += (best3 == yb[:, None]).any(1).sum().item()
            confidence, _ = outputs.softmax(1).max(1)
            conf_sum += confidence.sum().item()
            margin = outputs.max(1).values - outputs.mean(1)
            assert bool((margin >= 0).all())
    n = len(val_loader.dataset)
    print(f"epoch {epoch} top1 {top1 / n:.3f} top3 {top3 / n:.3f} confidence {conf_sum / n:.3f}")
