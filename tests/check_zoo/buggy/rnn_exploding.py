# expect: exploding-gradients
"""Vanilla RNN over long sequences, recurrent weights initialised too large, no clipping."""
import torch
import torch.nn as nn

torch.manual_seed(0)
N, T = 600, 60
x = torch.randn(N, T, 4)
y = x[:, :, 0].mean(1, keepdim=True)


class RNNRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 64, batch_first=True)
        nn.init.normal_(self.rnn.weight_hh_l0, std=0.6)
        self.head = nn.Linear(64, 1)

    def forward(self, seq):
        out, _ = self.rnn(seq)
        return self.head(out[:, -1])


model = RNNRegressor()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(3):
    for i in range(0, N, 30):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[i:i + 30]), y[i:i + 30])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
