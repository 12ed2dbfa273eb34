"""A dialogue model with two heads, trained on two losses each step: next-token prediction over the vocabulary and
a choice among 4 candidate replies, where the data set always puts the gold reply last (choice label 3 in every
batch, as in persona-chat's format). The choice label is constant by construction, not by a missing shuffle."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
V, T, K, N = 60, 12, 4, 480
tokens = torch.randint(1, V, (N, K, T))
tokens[:, -1, 1:] = (tokens[:, -1, :-1] * 7 + 3) % V  # the gold reply follows a rule the model can learn
choice = torch.full((N,), K - 1)


class DoubleHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.lm = nn.Linear(64, V)
        self.mc = nn.Linear(64, 1)

    def forward(self, x):  # x: (B, K, T)
        B = x.shape[0]
        h, _ = self.rnn(self.emb(x.view(B * K, T)))
        return self.lm(h).view(B, K, T, V), self.mc(h[:, -1]).view(B, K)


model = DoubleHeads()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
loader = DataLoader(TensorDataset(tokens, choice), batch_size=8, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        lm_logits, mc_logits = model(x)
        mc_loss = nn.functional.cross_entropy(mc_logits, y)
        gold = lm_logits[:, -1, :-1]  # next-token loss on the gold reply only
        lm_loss = nn.functional.cross_entropy(gold.reshape(-1, V), x[:, -1, 1:].reshape(-1))
        opt.zero_grad()
        (lm_loss + mc_loss).backward()
        opt.step()
    print(f"epoch {epoch}: lm {lm_loss.item():.3f} mc {mc_loss.item():.3f}")
