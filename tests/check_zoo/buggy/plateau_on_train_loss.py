# expect: plateau-on-train-loss
"""ReduceLROnPlateau stepped each epoch with the training loss; the held-out split is never evaluated."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X[:1400], y[:1400]), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", patience=1)
criterion = nn.CrossEntropyLoss()
for epoch in range(5):
    running = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        running += loss.item()
    scheduler.step(running / len(loader))
    print(epoch, running / len(loader))
