"""CosineAnnealingLR sized in optimizer steps (T_max = epochs * len(loader)) and stepped every batch:
the schedule ends with the last batch, as intended."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)

epochs = 4
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
criterion = nn.CrossEntropyLoss()
for epoch in range(epochs):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
    print(epoch, loss.item(), scheduler.get_last_lr())
