"""A GAN as d2l writes it: the discriminator's step runs the generator and detaches its output; the
generator's step runs it again. The first generator forward's graph is never backpropagated, but it
is a training input of the discriminator, not an evaluation forward."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = torch.randn(1000, 2) @ torch.tensor([[1.0, 2.0], [-0.1, 0.5]]) + torch.tensor([1.0, 2.0])
data_iter = DataLoader(TensorDataset(data), batch_size=8, shuffle=True)
net_G = nn.Sequential(nn.Linear(2, 2))
net_D = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 1))
loss = nn.BCEWithLogitsLoss(reduction="sum")
trainer_D = torch.optim.Adam(net_D.parameters(), lr=0.05)
trainer_G = torch.optim.Adam(net_G.parameters(), lr=0.005)


def update_D(X, Z):
    batch_size = X.shape[0]
    ones, zeros = torch.ones((batch_size,)), torch.zeros((batch_size,))
    trainer_D.zero_grad()
    real_Y = net_D(X)
    fake_X = net_G(Z)
    fake_Y = net_D(fake_X.detach())
    loss_D = (loss(real_Y, ones.reshape(real_Y.shape)) + loss(fake_Y, zeros.reshape(fake_Y.shape))) / 2
    loss_D.backward()
    trainer_D.step()
    return loss_D


def update_G(Z):
    ones = torch.ones((Z.shape[0],))
    trainer_G.zero_grad()
    fake_X = net_G(Z)
    fake_Y = net_D(fake_X)
    loss_G = loss(fake_Y, ones.reshape(fake_Y.shape))
    loss_G.backward()
    trainer_G.step()
    return loss_G


for epoch in range(2):
    total_D = total_G = 0.0
    for (X,) in data_iter:
        Z = torch.normal(0, 1, size=(X.shape[0], 2))
        total_D += float(update_D(X, Z))
        total_G += float(update_G(Z))
    print(epoch, total_D / len(data), total_G / len(data))
