# info-ok: train-val-overlap
"""A customer table whose records repeat (the same profile more than once, as real tables do), split at random
into training and validation rows: a few validation rows equal training rows by the data, not by the split. Each
categorical column has its own embedding; three of them are yes/no columns (tables of 2 rows) and the task has 2
classes, which must not make it a language model."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
N = 3000
cats = torch.stack([torch.randint(0, 2, (N,)), torch.randint(0, 2, (N,)), torch.randint(0, 2, (N,)),
                    torch.randint(0, 6, (N,))], 1)
num = torch.randn(N, 3)                     # balance, duration, ... (real numbers: distinct records differ)
repeat = torch.randint(0, N, (N // 20,))    # 5% of the records are copies of others
cats, num = torch.cat([cats, cats[repeat]]), torch.cat([num, num[repeat]])
y = ((cats[:, 0] + cats[:, 3] % 2 + (num[:, 0] > 0.3).long()) >= 2).long()
perm = torch.randperm(len(y))
train_idx, val_idx = perm[:2600], perm[2600:]
make = lambda idx, shuffle: DataLoader(TensorDataset(cats[idx], num[idx], y[idx]), batch_size=100, shuffle=shuffle)
train_loader, val_loader = make(train_idx, True), make(val_idx, False)


class TableNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, 4) for n in (2, 2, 2, 6))
        self.mlp = nn.Sequential(nn.Linear(4 * 4 + 3, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, c, x):
        return self.mlp(torch.cat([emb(c[:, i]) for i, emb in enumerate(self.embeddings)] + [x], 1))


model = TableNet()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(6):
    model.train()
    for c, x, t in train_loader:
        loss = nn.functional.cross_entropy(model(c, x), t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(c, x).argmax(1) == t).sum().item() for c, x, t in val_loader)
    print(f"epoch {epoch} loss {loss.item():.3f} val acc {correct / len(val_idx):.3f}")
