# expect: unregistered-submodules
import torch
import torch.nn as nn


class DeepMLP(nn.Module):
    def __init__(self, d_in, width, depth, n_out):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.hidden = [nn.Linear(width, width) for _ in range(depth)]
        self.out = nn.Linear(width, n_out)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


torch.manual_seed(0)
X = torch.randn(1000, 8)
y = (X.norm(dim=1) > 2.7).long()
model = DeepMLP(8, 32, 3, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(5):
    for i in range(0, 1000, 50):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(X[i:i + 50]), y[i:i + 50])
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
