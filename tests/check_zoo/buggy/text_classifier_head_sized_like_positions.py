# expect: output-classes-mismatch
"""A transformer text classifier over 4 topics whose head was copied from a 10-class model. Its learned position
table has 10 rows (sequences of 10 tokens): the same size as the head, which must not make its one label per
sequence look like next-token targets (token ids over a 10-entry vocabulary)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
V, T, TOPICS = 400, 10, 4


def batch(n):
    y = torch.randint(0, TOPICS, (n,))
    x = torch.randint(0, V // TOPICS, (n, T)) + y[:, None] * (V // TOPICS)  # each topic has its own words
    return x, y


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, 32)
        self.pos = nn.Embedding(T, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1)
        self.head = nn.Linear(32, 10)  # copied from a 10-class model

    def forward(self, x):
        positions = torch.arange(x.shape[1]).expand_as(x)
        return self.head(self.enc(self.tok(x) + self.pos(positions)).mean(1))


model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(150):
    x, y = batch(32)
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 49:
        print(f"step {step + 1} loss {loss.item():.3f}")
