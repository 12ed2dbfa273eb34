# Sequence classification with an LSTM: is the running sum of the sequence positive at the end?
import torch
import torch.nn as nn

torch.manual_seed(0)
N, T = 1200, 20
seqs = torch.randn(N, T, 1)
labels = (seqs.sum(dim=(1, 2)) > 0).long()


class SeqClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, 32, batch_first=True)
        self.out = nn.Linear(32, 2)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.out(h[:, -1])


model = SeqClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(4):
    order = torch.randperm(1000)
    for i in range(0, 1000, 40):
        idx = order[i:i + 40]
        optimizer.zero_grad()
        loss = criterion(model(seqs[idx]), labels[idx])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    with torch.no_grad():
        acc = (model(seqs[1000:]).argmax(1) == labels[1000:]).float().mean().item()
    model.train()
    print(f"epoch {epoch}: loss {loss.item():.3f}, held-out acc {acc:.2f}")
