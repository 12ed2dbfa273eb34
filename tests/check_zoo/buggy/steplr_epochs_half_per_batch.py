# expect: scheduler-stepped-per-batch
"""StepLR sized in epochs (decay by 10x once, after half of the 6 epochs) but stepped after every batch of
3-batch epochs: it decays every epoch instead, and the last half of training runs at 1/100 of the LR or less."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X, y = torch.tensor(X[:192] / 16.0, dtype=torch.float32), torch.tensor(y[:192])
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
epochs = 6
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=epochs // 2, gamma=0.1)
criterion = nn.CrossEntropyLoss()
for epoch in range(epochs):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
    print(f"epoch {epoch} loss {loss.item():.3f} lr {scheduler.get_last_lr()[0]:.2e}")
