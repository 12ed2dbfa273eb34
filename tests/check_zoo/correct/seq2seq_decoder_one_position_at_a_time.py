"""A GRU encoder-decoder translating token sequences, decoding one position at a time with teacher forcing.
Its vocabulary is closed and starts with special tokens (0 <unk>, 1 <pad>, 2 <sos>): <unk> never occurs,
<pad> is the loss's ignore_index and <sos> is cut off the targets, so the targets start at 3. They are
token ids, not class labels numbered from 1. The source language has its own, larger vocabulary, so
only the decoder's one-position lookups tell that the targets are tokens."""
import random

import torch
import torch.nn as nn

torch.manual_seed(0)
random.seed(0)
V_SRC, V, PAD, SOS, EOS = 45, 30, 1, 2, 3
words = list(range(4, V))
pairs = []
for _ in range(320):
    trg = random.sample(words, random.randint(3, 7))
    pairs.append(([w + 15 for w in trg], trg))  # a word-by-word "translation" from source ids 19..44


def batch(rows):
    T = max(len(s) for s, _ in rows) + 2
    src = torch.full((T, len(rows)), PAD)
    trg = torch.full((T, len(rows)), PAD)
    for j, (s, t) in enumerate(rows):
        src[: len(s) + 2, j] = torch.tensor([SOS] + s + [EOS])
        trg[: len(t) + 2, j] = torch.tensor([SOS] + t + [EOS])
    return src, trg


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb, self.trg_emb = nn.Embedding(V_SRC, 32), nn.Embedding(V, 32)
        self.encoder, self.decoder = nn.GRU(32, 64), nn.GRU(32, 64)
        self.out = nn.Linear(64, V)

    def forward(self, src, trg, teacher=0.5):
        _, h = self.encoder(self.src_emb(src))
        outputs = torch.zeros(trg.shape[0], trg.shape[1], V)
        token = trg[0]
        for t in range(1, trg.shape[0]):
            o, h = self.decoder(self.trg_emb(token).unsqueeze(0), h)
            outputs[t] = self.out(o.squeeze(0))
            token = trg[t] if random.random() < teacher else outputs[t].argmax(1)
        return outputs


model = Seq2Seq()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss(ignore_index=PAD)
for epoch in range(4):
    random.shuffle(pairs)
    total = 0.0
    for i in range(0, len(pairs), 32):
        src, trg = batch(pairs[i:i + 32])
        out = model(src, trg)
        loss = criterion(out[1:].reshape(-1, V), trg[1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        total += loss.item()
    print(epoch, round(total / (len(pairs) / 32), 4))
