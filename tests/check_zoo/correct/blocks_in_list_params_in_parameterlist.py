"""N-BEATS-style stacks: the blocks are kept in a plain Python list, and the model registers their parameters
itself, in an nn.ParameterList built from them. The optimizer gets every parameter and they all train; the
blocks have no layer that train()/eval() changes, so nothing is lost by the list."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, width), nn.Linear(width, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Stacks(nn.Module):
    def __init__(self):
        super().__init__()
        self.params = []
        self.blocks = []
        for _ in range(3):
            block = Block(32)
            self.blocks.append(block)
            self.params.extend(block.parameters())
        self.params = nn.ParameterList(self.params)

    def forward(self, x):
        residual, forecast = x, 0
        for block in self.blocks:
            out = block(residual)
            residual, forecast = residual - out, forecast + out
        return forecast


model = Stacks()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
t = torch.linspace(0, 20, 2000)
series = torch.sin(t) + 0.1 * torch.randn(2000)
windows = series.unfold(0, 17, 1)
x, y = windows[:, :16], windows[:, 1:]
for epoch in range(5):
    perm = torch.randperm(len(x))
    for i in range(0, len(x), 64):
        idx = perm[i:i + 64]
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
