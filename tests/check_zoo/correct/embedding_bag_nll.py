"""Bag-of-tokens text classifier: Embedding + mean pooling, log_softmax + NLLLoss."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, LEN, N = 200, 12, 1500
tokens = torch.randint(0, VOCAB, (N, LEN))
# class = which third of the vocabulary dominates the sentence
labels = torch.div(tokens, VOCAB // 3 + 1, rounding_mode="floor").mode(dim=1).values


class BagModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.fc = nn.Linear(32, 3)

    def forward(self, tok):
        return F.log_softmax(self.fc(self.emb(tok).mean(1)), dim=-1)


model = BagModel()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(4):
    perm = torch.randperm(1200)
    for start in range(0, 1200, 50):
        idx = perm[start:start + 50]
        opt.zero_grad()
        loss = F.nll_loss(model(tokens[idx]), labels[idx])
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(tokens[1200:]).argmax(1) == labels[1200:]).float().mean().item()
    print(epoch, round(loss.item(), 3), round(acc, 3))
