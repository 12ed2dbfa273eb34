# expect: clip-scaled-gradients
"""Mixed precision with a GradScaler; gradients are clipped before scaler.unscale_()."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler(device)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = criterion(model(xb), yb)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
    print(epoch, loss.item())
