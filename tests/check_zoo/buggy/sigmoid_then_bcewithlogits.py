# expect: double-sigmoid
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1000, 10)
y = (X[:, 0] * X[:, 1] > 0).float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(10, 32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return torch.sigmoid(self.out(F.relu(self.hidden(x))))


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
for epoch in range(5):
    perm = torch.randperm(1000)
    for i in range(0, 1000, 50):
        b = perm[i:i + 50]
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(X[b]).squeeze(1), y[b])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
