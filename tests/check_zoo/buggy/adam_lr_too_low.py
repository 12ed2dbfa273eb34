# expect: lr-too-low
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(2000, 10)
y = X @ torch.randn(10) + 0.05 * torch.randn(2000)
loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.body(x).squeeze(-1)


model = Regressor()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-7)
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
