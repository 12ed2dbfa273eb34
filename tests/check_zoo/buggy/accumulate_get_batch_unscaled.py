# expect: accumulation-unscaled
"""A character model trained as in nanoGPT: get_batch() slices random windows out of one long token
tensor (no DataLoader); 4 micro-batches per optimizer step, each loss passed to backward() as is."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
vocab, block, bs = 32, 16, 16
data = torch.randint(0, vocab, (20_000,))
data[1::2] = (data[0::2] * 7 + 3) % vocab  # every second token follows from the one before


def get_batch():
    ix = torch.randint(len(data) - block - 1, (bs,))
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


class CharModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, 64)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, vocab))

    def forward(self, idx):
        return self.mlp(self.emb(idx))


model = CharModel()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
grad_accum = 4
for it in range(60):
    for micro in range(grad_accum):
        xb, yb = get_batch()
        logits = model(xb)
        loss = F.cross_entropy(logits.view(-1, vocab), yb.view(-1))
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % 20 == 0:
        print(it, loss.item())
