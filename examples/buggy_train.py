"""A hand-written training script with two silent mistakes, for `torchwise check`.

It runs, the loss goes down a little, and nothing crashes: exactly the kind of script that costs
days. Run `torchwise check -- python examples/buggy_train.py` to see what is wrong with it.
"""
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

x, y = load_digits(return_X_y=True)
x = torch.tensor(x, dtype=torch.float32) / 16
y = torch.tensor(y)
train = DataLoader(TensorDataset(x[:1500], y[:1500]), batch_size=32, shuffle=True)
val = DataLoader(TensorDataset(x[1500:], y[1500:]), batch_size=64)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10),
                      nn.Softmax(dim=1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

for epoch in range(3):
    for xb, yb in train:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    correct = 0
    with torch.no_grad():
        for xb, yb in val:
            correct += (model(xb).argmax(1) == yb).sum().item()
    print(f"epoch {epoch}: val accuracy {correct / 297:.3f}")
