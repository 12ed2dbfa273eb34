# expect: lr-too-high
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32)
X = (X - X.mean(0)) / (X.std(0) + 1e-6)
loader = DataLoader(TensorDataset(X, torch.tensor(y)), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=20.0, momentum=0.9)
for epoch in range(4):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
