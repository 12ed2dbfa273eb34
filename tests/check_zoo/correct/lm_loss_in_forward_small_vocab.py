"""A character-level language model over 30 symbols that computes its own loss inside forward (as Hugging Face
models do when given labels): targets are token ids, rarely all seen, with natural frequencies."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, T = 30, 24
probs = 1.0 / torch.arange(1, V + 1).float()  # Zipf-like symbol frequencies; symbols 0 and 1 never occur
probs[:2] = 0
text = torch.multinomial(probs / probs.sum(), 20000, replacement=True)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, 32)
        self.pos = nn.Embedding(T, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, ids, labels=None):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        logits = self.head(self.rnn(h)[0])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
        return loss, logits


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(120):
    i = torch.randint(0, len(text) - T, (16,))
    ids = torch.stack([text[j:j + T] for j in i])
    loss, _ = model(ids, labels=ids)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
