"""A BERT-style pair classifier in plain torch: two sentences in one sequence, told apart by a token-type table of
2 rows, and 2 classes (the second sentence's topic). One label per pair, so its
targets are class labels, not tokens, even though the class count equals the token-type table's size."""
import torch
import torch.nn as nn

torch.manual_seed(0)
V, HALF = 300, 6


def batch(n):
    a_topic = torch.randint(0, 2, (n,))
    b_topic = torch.randint(0, 2, (n,))
    a = torch.randint(1, V // 2, (n, HALF)) + a_topic[:, None] * (V // 2)
    b = torch.randint(1, V // 2, (n, HALF)) + b_topic[:, None] * (V // 2)
    ids = torch.cat([a, b], 1).clamp(max=V - 1)
    types = torch.cat([torch.zeros(n, HALF, dtype=torch.long), torch.ones(n, HALF, dtype=torch.long)], 1)
    return ids, types, b_topic


class PairClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, 32)
        self.types = nn.Embedding(2, 32)
        self.pos = nn.Embedding(2 * HALF, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2)
        self.head = nn.Linear(64, 2)

    def forward(self, ids, types):
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        h = self.enc(self.tok(ids) + self.types(types) + self.pos(positions))
        return self.head(torch.cat([h[:, :HALF].mean(1), h[:, HALF:].mean(1)], 1))


model = PairClassifier()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(200):
    ids, types, y = batch(32)
    loss = nn.functional.cross_entropy(model(ids, types), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 49:
        print(f"step {step + 1} loss {loss.item():.3f}")
