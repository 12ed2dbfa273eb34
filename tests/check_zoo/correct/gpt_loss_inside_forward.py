"""A tiny GPT in the style of minGPT/nanoGPT: token and position embeddings, causal self-attention, a
head tied to the token embedding, and the loss computed inside forward() on logits.view(-1, V) against
targets.view(-1), with ignore_index=-1. Tokens are Zipfian over a 1000-word vocabulary."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, T, B, D = 1000, 16, 8, 32
stream = torch.multinomial(1.0 / torch.arange(1, V + 1, dtype=torch.float), 30_000, replacement=True)


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.ln = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, idx, targets=None):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        h = self.ln(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)[0]
        x = x + self.mlp(self.ln_f(x))
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


model = TinyGPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
for it in range(80):
    ix = torch.randint(len(stream) - T - 1, (B,))
    x = torch.stack([stream[i:i + T] for i in ix])
    y = torch.stack([stream[i + 1:i + 1 + T] for i in ix])
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it % 20 == 0:
        print(it, round(loss.item(), 3))
