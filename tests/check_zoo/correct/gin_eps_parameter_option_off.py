# info-ok: no-gradient-flow
# info-ok: dead-relu
"""A graph isomorphism network whose eps parameter is built always but used only with learn_eps=True (off here,
as in the paper's default runs): the optimizer holds it, no operation ever reads it, and it never gets a gradient.
Dense adjacency matrices of random graphs, graph classification by summed node features."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def random_graph(n):
    a = (torch.rand(n, n) < 0.3).float()
    a = torch.triu(a, 1)
    a = a + a.T
    label = int(a.sum() / n > 0.3 * (n - 1))  # denser graphs are class 1
    return a, torch.ones(n, 4), label


graphs = [random_graph(int(n)) for n in torch.randint(6, 14, (160,))]


class GIN(nn.Module):
    def __init__(self, d_in, hidden, n_layers, n_classes, learn_eps=False):
        super().__init__()
        self.learn_eps = learn_eps
        self.eps = nn.Parameter(torch.zeros(n_layers))
        self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(d_in if i == 0 else hidden, hidden), nn.ReLU(),
                                                 nn.Linear(hidden, hidden)) for i in range(n_layers)])
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, adj, h):
        for layer, mlp in enumerate(self.mlps):
            pooled = adj @ h
            if self.learn_eps:
                pooled = pooled + (1 + self.eps[layer]) * h
            else:
                pooled = pooled + h
            h = F.relu(mlp(pooled))
        return self.out(h.sum(0, keepdim=True))


model = GIN(4, 32, 2, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(4):
    total = 0.0
    for i in range(0, len(graphs), 8):
        optimizer.zero_grad()
        loss = sum(F.cross_entropy(model(a, h), torch.tensor([y])) for a, h, y in graphs[i:i + 8]) / 8
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} loss {total / 20:.3f}")
