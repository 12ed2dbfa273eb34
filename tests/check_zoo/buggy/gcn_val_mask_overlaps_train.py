# expect: train-val-overlap
"""Transductive GCN whose validation mask overlaps its training mask (idx_val starts inside
idx_train): half of the validation nodes' labels were trained on, so val accuracy is optimistic."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
N, D, C = 300, 24, 4
labels = torch.randint(0, C, (N,))
features = torch.randn(N, D) + F.one_hot(labels, D).float() * 1.5
adj = ((torch.rand(N, N) < 0.03) | torch.eye(N, dtype=torch.bool)).float()
adj = adj / adj.sum(1, keepdim=True)
idx_train = torch.arange(0, 120)
idx_val = torch.arange(60, 180)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, 16)
        self.w2 = nn.Linear(16, C)

    def forward(self, x, a):
        return a @ self.w2(F.relu(a @ self.w1(x)))


model = GCN()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(40):
    model.train()
    opt.zero_grad()
    out = model(features, adj)
    loss = F.cross_entropy(out[idx_train], labels[idx_train])
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        out = model(features, adj)
        acc = (out[idx_val].argmax(1) == labels[idx_val]).float().mean().item()
    if epoch % 10 == 0:
        print(epoch, round(loss.item(), 3), round(acc, 3))
