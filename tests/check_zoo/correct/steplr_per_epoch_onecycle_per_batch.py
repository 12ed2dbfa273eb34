"""Digits MLP: StepLR stepped once per epoch, OneCycleLR (a per-batch schedule) on a second model."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
criterion = nn.CrossEntropyLoss()

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
for epoch in range(4):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    scheduler.step()
    print(epoch, loss.item(), scheduler.get_last_lr())

model2 = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer2 = torch.optim.AdamW(model2.parameters(), lr=1e-3)
onecycle = torch.optim.lr_scheduler.OneCycleLR(optimizer2, max_lr=3e-3, total_steps=2 * len(loader))
for epoch in range(2):
    for xb, yb in loader:
        optimizer2.zero_grad()
        loss = criterion(model2(xb), yb)
        loss.backward()
        optimizer2.step()
        onecycle.step()
    print(epoch, loss.item())
