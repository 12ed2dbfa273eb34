"""A MoCo-style contrastive learner: a query encoder trained by InfoNCE (positive in column 0) against a queue of
keys from a momentum encoder that no optimizer holds. The queue moves, so the loss need not go down."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(2048, 32)
loader = DataLoader(TensorDataset(X), batch_size=64, shuffle=True, drop_last=True)
enc_q = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
enc_k = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
enc_k.load_state_dict(enc_q.state_dict())
for p in enc_k.parameters():
    p.requires_grad = False
queue = F.normalize(torch.randn(512, 16), dim=1)
opt = torch.optim.SGD(enc_q.parameters(), lr=0.03, momentum=0.9)
for epoch in range(3):
    for (x,) in loader:
        x1, x2 = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
        q = F.normalize(enc_q(x1), dim=1)
        with torch.no_grad():
            for pk, pq in zip(enc_k.parameters(), enc_q.parameters()):
                pk.data.mul_(0.99).add_(pq.data, alpha=0.01)
            k = F.normalize(enc_k(x2), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ queue.t()
        logits = torch.cat([pos, neg], dim=1) / 0.07
        labels = torch.zeros(logits.size(0), dtype=torch.long)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        queue = torch.cat([k, queue])[:512]
print("done")
