"""Character-level GRU language model: per-token cross entropy on (N, C, T) logits, hidden state detached."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
text = "the quick brown fox jumps over the lazy dog. " * 60
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
V, T, B = len(chars), 24, 32


class CharGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, V)

    def forward(self, idx, h=None):
        y, h = self.gru(self.emb(idx), h)
        return self.out(y), h


model = CharGRU()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for it in range(150):
    starts = torch.randint(0, len(data) - T - 1, (B,))
    x = torch.stack([data[s:s + T] for s in starts])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts])
    logits, _ = model(x)
    loss = F.cross_entropy(logits.transpose(1, 2), y)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it % 50 == 0:
        print(it, round(loss.item(), 3))
