"""Digits classifier: custom module, DataLoader, CrossEntropyLoss, dropout, validation each epoch."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
digits = load_digits()
X = torch.tensor(digits.data, dtype=torch.float32)
y = torch.tensor(digits.target, dtype=torch.long)
perm = torch.randperm(len(X))
X, y = X[perm], y[perm]
X_train, y_train, X_val, y_val = X[:1400], y[:1400], X[1400:], y[1400:]
mean, std = X_train.mean(0), X_train.std(0) + 1e-6
X_train, X_val = (X_train - mean) / std, (X_val - mean) / std


class MLP(nn.Module):
    def __init__(self, d_in, hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


model = MLP(64, 128, 10)
train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(X_val, y_val), batch_size=256)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(5):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val_loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
    print(f"epoch {epoch} loss {loss.item():.3f} val acc {correct / len(X_val):.3f}")
