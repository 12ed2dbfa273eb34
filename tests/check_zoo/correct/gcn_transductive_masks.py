"""Transductive node classification with a two-layer GCN: one forward over the whole graph, the loss
on the training nodes' rows (out[idx_train]) and validation on other nodes' rows of the same forward
(out[idx_val]); the features of every node go into training and evaluation alike, by design."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
N, D, C = 300, 24, 4
labels = torch.randint(0, C, (N,))
features = torch.randn(N, D) + F.one_hot(labels, D).float() * 1.5
same = (labels[:, None] == labels[None, :]) & (torch.rand(N, N) < 0.05)
adj = ((same | (torch.rand(N, N) < 0.01)) | torch.eye(N, dtype=torch.bool)).float()
adj = adj / adj.sum(1, keepdim=True)
perm = torch.randperm(N)
idx_train, idx_val, idx_test = perm[:60], perm[60:160], perm[160:]


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, 16)
        self.w2 = nn.Linear(16, C)

    def forward(self, x, a):
        h = F.dropout(F.relu(a @ self.w1(x)), 0.5, self.training)
        return F.log_softmax(a @ self.w2(h), dim=1)


model = GCN()
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for epoch in range(60):
    model.train()
    opt.zero_grad()
    out = model(features, adj)
    loss = F.nll_loss(out[idx_train], labels[idx_train])
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        out = model(features, adj)
        val_loss = F.nll_loss(out[idx_val], labels[idx_val]).item()
        pred = out.argmax(1)
        accs = [(pred[idx] == labels[idx]).float().mean().item() for idx in (idx_train, idx_val, idx_test)]
    if epoch % 20 == 0:
        print(epoch, round(loss.item(), 3), round(val_loss, 3), [round(a, 2) for a in accs])
