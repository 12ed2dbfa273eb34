"""An LSTM language model in the layout of the classic word-language-model example: batches are
(T, B) token ids, the model returns log_softmax over the vocabulary as (T*B, V), and nll_loss gets the
next tokens as (T*B,). Token frequencies are Zipfian; word ids are given in order of first appearance."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, T, B = 1500, 20, 10
zipf = torch.multinomial(1.0 / torch.arange(1, V + 1, dtype=torch.float), 30_000, replacement=True)
order = {}
corpus = torch.tensor([order.setdefault(int(w), len(order)) for w in zipf])
data = corpus[: (len(corpus) // B) * B].view(B, -1).t().contiguous()  # (steps, B), like batchify()


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, 32)
        self.rnn = nn.LSTM(32, 48)
        self.decoder = nn.Linear(48, V)

    def forward(self, src, hidden=None):
        out, hidden = self.rnn(self.encoder(src), hidden)
        decoded = self.decoder(out).view(-1, V)
        return F.log_softmax(decoded, dim=1), hidden


model = RNNModel()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.NLLLoss()
hidden = None
for step, i in enumerate(range(0, data.size(0) - 1 - T, T)):
    if step == 90:
        break
    src, tgt = data[i:i + T], data[i + 1:i + 1 + T].reshape(-1)
    if hidden is not None:
        hidden = tuple(h.detach() for h in hidden)
    out, hidden = model(src, hidden)
    loss = criterion(out, tgt)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    if step % 30 == 0:
        print(step, round(loss.item(), 3))
