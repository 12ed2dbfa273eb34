"""Binary classification on tabular data with BCEWithLogitsLoss; sigmoid only for prediction."""
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(0)
X = rng.normal(size=(1500, 8)).astype("float32")
y = ((X[:, 0] + X[:, 1] * X[:, 2]) > 0).astype("float32")
Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
train_ds = TensorDataset(Xt[:1200], yt[:1200])
val_ds = TensorDataset(Xt[1200:], yt[1200:])

model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)

for epoch in range(5):
    model.train()
    for xb, yb in DataLoader(train_ds, batch_size=64, shuffle=True):
        optimizer.zero_grad()
        logits = model(xb).squeeze(1)
        loss = criterion(logits, yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(val_ds.tensors[0]).squeeze(1))
        acc = ((probs > 0.5).float() == val_ds.tensors[1]).float().mean()
    print(epoch, float(acc))
