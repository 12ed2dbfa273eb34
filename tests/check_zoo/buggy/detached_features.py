# expect: no-gradient-flow
"""The encoder output is detached 'to save memory': the encoder never learns."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
loader = DataLoader(TensorDataset(torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)),
                    batch_size=64, shuffle=True)


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        z = self.encoder(x).detach()
        return self.head(z)


model = EncoderClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
