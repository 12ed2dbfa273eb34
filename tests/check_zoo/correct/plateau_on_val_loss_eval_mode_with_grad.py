# info-ok: eval-without-no-grad
"""ReduceLROnPlateau stepped once per epoch with the validation loss, from an eval function that calls
model.eval() and returns the mean loss but runs without no_grad (as many tutorials do)."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
train = DataLoader(TensorDataset(X[:1400], y[:1400]), batch_size=64, shuffle=True)
val = DataLoader(TensorDataset(X[1400:], y[1400:]), batch_size=128)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
criterion = nn.CrossEntropyLoss()


def train_fn():
    model.train()
    total = 0.0
    for xb, yb in train:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(train)


def eval_fn():
    model.eval()
    total = 0.0
    for xb, yb in val:
        total += criterion(model(xb), yb).item()
    return total / len(val)


for epoch in range(4):
    train_loss, val_loss = train_fn(), eval_fn()
    scheduler.step(val_loss)
    print(f"epoch {epoch} train {train_loss:.3f} val {val_loss:.3f}")
