# Mixed precision on the CPU (bfloat16 autocast), label smoothing, gradient clipping.
import torch
from torch import nn
from sklearn.datasets import load_digits

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32)
X = (X - X.mean(0)) / (X.std(0) + 1e-5)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.LayerNorm(128), nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
for epoch in range(3):
    perm = torch.randperm(1600)
    for i in range(0, 1600, 50):
        b = perm[i:i + 50]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = crit(model(X[b]), y[b])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
    model.eval()
    with torch.no_grad():
        print(epoch, (model(X[1600:]).argmax(1) == y[1600:]).float().mean().item())
    model.train()
