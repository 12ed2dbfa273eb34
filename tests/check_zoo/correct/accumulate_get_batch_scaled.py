"""nanoGPT-style accumulation done right: get_batch() over one token tensor, loss / grad_accum."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
vocab, block, bs = 32, 16, 16
data = torch.randint(0, vocab, (20_000,))
data[1::2] = (data[0::2] * 7 + 3) % vocab


def get_batch():
    ix = torch.randint(len(data) - block - 1, (bs,))
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


model = nn.Sequential(nn.Embedding(vocab, 64), nn.Linear(64, 128), nn.GELU(), nn.Linear(128, vocab))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
grad_accum = 4
for it in range(60):
    for micro in range(grad_accum):
        xb, yb = get_batch()
        loss = F.cross_entropy(model(xb).view(-1, vocab), yb.view(-1)) / grad_accum
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % 20 == 0:
        print(it, loss.item() * grad_accum)
