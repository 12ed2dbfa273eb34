# expect: softmax-before-loss
"""A softmax at the end of the model feeds CrossEntropyLoss; with SGD the squashed gradients make
tiny updates: the loss stays flat because of the softmax, not because of the learning rate."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(3000, 20)
y = (X[:, :10] @ torch.randn(10, 10)).argmax(1)
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=1))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.002)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
