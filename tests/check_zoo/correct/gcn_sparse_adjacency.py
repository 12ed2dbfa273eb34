"""A graph convolutional network as Kipf's reference code writes it: a row-normalised adjacency kept as a
torch.sparse tensor and multiplied with torch.spmm, full-batch training on the training nodes' mask and accuracy
on the validation nodes. A sparse input has no data pointer and no rows: the checker must read around it."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
N, D, C = 600, 32, 4
labels = torch.randint(0, C, (N,))
features = torch.randn(N, D) * 0.5 + F.one_hot(labels, C).float().repeat(1, D // C)
src = torch.randint(0, N, (3000,))
dst = torch.where(torch.rand(3000) < 0.8, src[torch.randperm(3000)], torch.randint(0, N, (3000,)))
same = labels[src] == labels[dst]
edges = torch.stack([src[same], dst[same]])
edges = torch.cat([edges, edges.flip(0), torch.arange(N).repeat(2, 1)], 1)
values = torch.ones(edges.shape[1])
degree = torch.zeros(N).index_add_(0, edges[0], values)
adj = torch.sparse_coo_tensor(edges, values / degree[edges[0]], (N, N)).coalesce()
idx_train, idx_val = torch.arange(0, 300), torch.arange(300, 500)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(D, 16), nn.Linear(16, C)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x, adj):
        x = self.dropout(F.relu(torch.spmm(adj, self.w1(x))))
        return F.log_softmax(torch.spmm(adj, self.w2(x)), dim=1)


model = GCN()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
for epoch in range(100):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss = F.nll_loss(output[idx_train], labels[idx_train])
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        output = model(features, adj)
        acc = (output[idx_val].argmax(1) == labels[idx_val]).float().mean()
    if epoch % 25 == 24:
        print(f"epoch {epoch + 1} loss {loss.item():.3f} val acc {acc.item():.3f}")
