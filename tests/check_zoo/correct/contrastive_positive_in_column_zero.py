"""An InfoNCE/NT-Xent contrastive loss: each row's logits hold its positive in column 0 and the negatives
after it, and the target is class 0 for every row by construction (not labels from data)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(1024, 16)
loader = DataLoader(TensorDataset(X), batch_size=32, shuffle=True)
encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
for epoch in range(3):
    for (xb,) in loader:
        a = nn.functional.normalize(encoder(xb + 0.1 * torch.randn_like(xb)), dim=1)
        b = nn.functional.normalize(encoder(xb + 0.1 * torch.randn_like(xb)), dim=1)
        sim = a @ b.t() / 0.2                                   # (B, B): the positive of row i is column i
        pos = sim.diag().unsqueeze(1)
        neg = sim.masked_select(~torch.eye(len(xb), dtype=torch.bool)).view(len(xb), -1)
        logits = torch.cat([pos, neg], dim=1)                   # (B, B): positive first
        loss = nn.functional.cross_entropy(logits, torch.zeros(len(xb), dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))
