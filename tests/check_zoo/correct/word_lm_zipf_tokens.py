"""Word-level GRU language model on Zipfian token ids: logits (B, T, V) flattened to (B*T, V) for
cross_entropy, targets the next tokens flattened to (B*T,). Most of the 2000-word vocabulary is rare
and never appears in a short run; the frequent words are 100x more common than the rare ones."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, T, B = 2000, 16, 16
ranks = torch.arange(1, V + 1, dtype=torch.float)
stream = torch.multinomial(1.0 / ranks, 40_000, replacement=True)  # Zipf: token id = frequency rank


class WordLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.rnn = nn.GRU(32, 48, batch_first=True)
        self.head = nn.Linear(48, V)

    def forward(self, idx):
        h, _ = self.rnn(self.emb(idx))
        return self.head(h)


model = WordLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(100):
    starts = torch.randint(0, len(stream) - T - 1, (B,))
    x = torch.stack([stream[s:s + T] for s in starts])
    y = torch.stack([stream[s + 1:s + T + 1] for s in starts])
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(step, round(loss.item(), 3))
