"""A tutorial's check_accuracy(train_loader, model) after training: the accuracy on the training data, asked for by
name over the very loader the steps came from (it prints "Checking accuracy on training data"). No validation
set is claimed, so nothing is overstated."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
train_loader = DataLoader(TensorDataset(torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)),
                          batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def check_accuracy(loader, model):
    print("Checking accuracy on training data")
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    print(f"Got {correct} / {total} with accuracy {100 * correct / total:.2f}")


for epoch in range(3):
    for x, y in train_loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")
check_accuracy(train_loader, model)
