# Reports accuracy on the training set AND on a held-out split each epoch (random_split).
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0 - 0.3
ds = TensorDataset(X, torch.tensor(y))
tr, va = random_split(ds, [1400, 397], generator=torch.Generator().manual_seed(1))
train_loader = DataLoader(tr, batch_size=50, shuffle=True)
eval_train_loader = DataLoader(tr, batch_size=200)
val_loader = DataLoader(va, batch_size=200)

model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10))
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
crit = nn.CrossEntropyLoss()


@torch.no_grad()
def accuracy(loader):
    model.eval()
    ok = n = 0
    for xb, yb in loader:
        ok += (model(xb).argmax(-1) == yb).sum().item()
        n += len(yb)
    return ok / n


for epoch in range(4):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad()
        crit(model(xb), yb).backward()
        opt.step()
    print(epoch, "train", accuracy(eval_train_loader), "val", accuracy(val_loader))
