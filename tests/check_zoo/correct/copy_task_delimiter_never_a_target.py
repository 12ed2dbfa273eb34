# info-ok: output-classes-mismatch
# info-ok: label-imbalance
"""The copy-memory task: a sequence of digits 1-8, blanks (0), then a delimiter (9) after which the model must
repeat the digits. The model has 10 outputs, one per symbol of the vocabulary, and the delimiter is in the
inputs only: it is never a target. One reserved output that is never asked for is how such vocabularies are
built, not a head sized for another data set."""
import torch
import torch.nn as nn

torch.manual_seed(0)
T, MEM, N = 20, 5, 2048


def batches():
    digits = torch.randint(1, 9, (N, MEM))
    x = torch.zeros(N, T + 2 * MEM, dtype=torch.long)
    y = torch.zeros(N, T + 2 * MEM, dtype=torch.long)
    x[:, :MEM] = digits
    x[:, T + MEM - 1] = 9  # the delimiter: recall now
    y[:, -MEM:] = digits
    return x, y


class Recall(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(1, 64, batch_first=True)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        h, _ = self.rnn(x.float().unsqueeze(-1))  # the symbols as values, as the TCN paper's copy task feeds them
        return self.out(h)


model = Recall()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
x, y = batches()
for epoch in range(3):
    perm = torch.randperm(N)
    for i in range(0, N, 64):
        idx = perm[i:i + 64]
        loss = nn.functional.cross_entropy(model(x[idx]).reshape(-1, 10), y[idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
