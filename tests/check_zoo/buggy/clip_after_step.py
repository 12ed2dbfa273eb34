# expect: clip-has-no-effect
"""A recurrent model whose gradient clipping sits after optimizer.step()."""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(512, 20, 8)
y = (x[:, :, 0].sum(1) > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for i in range(0, len(x), 64):
        xb, yb = x[i:i + 64], y[i:i + 64]
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    print(epoch, loss.item())
