# expect: labels-not-zero-based
"""Class ids in the 'file' run 1..10; the model got an 11th output so cross entropy stops complaining."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
digits = load_digits()
labels = digits.target + 1            # ids as stored in the label file
X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
y = torch.tensor(labels, dtype=torch.long)
n_classes = int(np.max(labels)) + 1
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_classes))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
