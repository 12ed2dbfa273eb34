# expect: scheduler-stepped-per-batch
"""ExponentialLR(gamma=0.9), meant per epoch, stepped after every batch: its schedule is longer than one
epoch, but the LR is below 1/100 of its start after 44 of the run's 145 batches."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
criterion = nn.CrossEntropyLoss()
for epoch in range(5):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
    print(epoch, loss.item(), scheduler.get_last_lr())
