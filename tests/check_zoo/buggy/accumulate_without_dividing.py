# expect: accumulation-unscaled
"""Gradient accumulation over 4 batches per optimizer step; each batch's loss goes to backward() as is."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)

model = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()
accum_steps = 4
for epoch in range(3):
    running = 0.0
    for i, (xb, yb) in enumerate(loader):
        loss = criterion(model(xb), yb)
        loss.backward()
        running += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    print(f"epoch {epoch} mean loss {running / len(loader):.3f}")
