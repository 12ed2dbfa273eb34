"""ReduceLROnPlateau stepped each epoch with the validation loss."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
perm = torch.randperm(len(X))
tr, va = perm[:1400], perm[1400:]
loader = DataLoader(TensorDataset(X[tr], y[tr]), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(X[va], y[va]), batch_size=256)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=1)
criterion = nn.CrossEntropyLoss()
for epoch in range(5):
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(criterion(model(xb), yb).item() * len(yb) for xb, yb in val_loader) / len(va)
    scheduler.step(val_loss)
    print(epoch, val_loss)
