# expect: wrong-loss-for-task
"""A per-token tagger trained with nll_loss on raw (B, C, T) scores: nll_loss expects log-probabilities,
so it only pushes the target score up without bound and never normalizes over the tags."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, C, T, B = 50, 6, 10, 16
tag_of = torch.randint(0, C, (V,))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.conv = nn.Conv1d(16, C, 3, padding=1)

    def forward(self, idx):
        return self.conv(self.emb(idx).transpose(1, 2))  # (B, C, T) scores, no log_softmax


model = Tagger()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(40):
    x = torch.randint(0, V, (B, T))
    loss = F.nll_loss(model(x), tag_of[x])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, round(loss.item(), 3))
