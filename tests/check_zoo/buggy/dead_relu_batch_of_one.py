# expect: dead-relu
"""Online learning, one sample per step: the hidden layer's bias starts far negative, so its ReLU
units output 0 for every input (and get no gradient to recover)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(400, 12)
y = (X[:, :3].sum(1, keepdim=True) > 0).float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(12, 48)
        self.act = nn.ReLU()
        self.out = nn.Linear(48, 1)
        nn.init.constant_(self.hidden.bias, -6.0)

    def forward(self, x):
        return self.out(self.act(self.hidden(x)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.BCEWithLogitsLoss()
for epoch in range(1):
    for i in range(len(X)):
        opt.zero_grad()
        loss = loss_fn(model(X[i:i + 1]), y[i:i + 1])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
