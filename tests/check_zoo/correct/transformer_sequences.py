# Tiny Transformer encoder classifying token sequences; dropout inside; eval() for validation.
import torch
import torch.nn as nn

torch.manual_seed(0)
V, L = 50, 15
tokens = torch.randint(1, V, (1400, L))
labels = ((tokens < V // 2).float().mean(1) > 0.5).long()   # mostly 'low' tokens?


class TinyTransformer(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.randn(1, L, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.cls = nn.Linear(d, 2)

    def forward(self, tok):
        h = self.encoder(self.embed(tok) + self.pos)
        return self.cls(h.mean(1))


model = TinyTransformer()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
for epoch in range(3):
    model.train()
    perm = torch.randperm(1200)
    for i in range(0, 1200, 40):
        b = perm[i:i + 40]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens[b]), labels[b])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(tokens[1200:]).argmax(1) == labels[1200:]).float().mean()
    print(epoch, loss.item(), acc.item())
