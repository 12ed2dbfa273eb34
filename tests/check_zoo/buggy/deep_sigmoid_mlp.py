# expect: vanishing-gradients
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)

layers = [nn.Linear(64, 64), nn.Sigmoid()]
for _ in range(9):
    layers += [nn.Linear(64, 64), nn.Sigmoid()]
layers.append(nn.Linear(64, 10))
model = nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[b]), y[b])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
