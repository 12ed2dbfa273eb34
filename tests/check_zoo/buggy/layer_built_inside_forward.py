# expect: unregistered-submodules
"""A transformer-style block that builds its output projection and its LayerNorm inside forward(): each call makes
new layers with fresh random weights, so they are never trained (the optimizer, built once from
model.parameters(), does not hold them) and the model's output is noise in their part."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        h, _ = self.attn(x, x, x)
        h = nn.Linear(h.shape[-1], h.shape[-1])(h)  # built at every call
        h = nn.LayerNorm(h.shape[-1])(h + x)
        return self.head(h.mean(1))


model = Block(32)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(512, 10, 32)
y = (x[:, 0, 0] > 0).long() + (x[:, 0, 1] > 0).long()
for epoch in range(3):
    perm = torch.randperm(512)
    for i in range(0, 512, 32):
        idx = perm[i:i + 32]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
