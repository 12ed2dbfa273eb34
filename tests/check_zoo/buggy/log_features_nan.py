# expect: nonfinite-loss
"""A 'log-compression' layer applied to features that can be negative."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LogCompress(nn.Module):
    def forward(self, x):
        return torch.log(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.compress = LogCompress()
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.compress(self.proj(x)))


X = torch.randn(800, 16)
y = torch.randint(0, 4, (800,))
model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for i in range(0, 800, 40):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[i:i + 40]), y[i:i + 40])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
