# expect: softmax-before-loss
"""An LSTM classifier whose head reads h_n, shaped (num_layers=1, B, H), and applies F.softmax without
a dim: for a 3-D tensor the implicit dim is 0, of size 1, so every "probability" is exactly 1."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
T, B, C = 12, 32, 5
protos = torch.randn(C, 8)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 32)
        self.fc = nn.Linear(32, C)

    def forward(self, x):
        _, (h_n, _) = self.lstm(x)
        return F.softmax(self.fc(h_n))  # (1, B, C): softmax over the layer dimension


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for step in range(40):
    y = torch.randint(0, C, (B,))
    x = protos[y].unsqueeze(0) + torch.randn(T, B, 8)
    loss = criterion(model(x).squeeze(0), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, round(loss.item(), 4))
