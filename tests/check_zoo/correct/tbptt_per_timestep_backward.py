"""An RNN cell trained with a backward() per time step on a sequence-regression task (the prediction at each step
is compared with the next value), gradients summed over the sequence and one optimizer step per sequence."""

import torch
import torch.nn as nn

torch.manual_seed(0)
cell = nn.GRUCell(1, 32)
head = nn.Linear(32, 1)
params = list(cell.parameters()) + list(head.parameters())
optimizer = torch.optim.Adam(params, lr=3e-3)
loss_fn = nn.MSELoss()
for it in range(150):
    phase = torch.rand(8, 1) * 6.28
    t = torch.arange(21).float() * 0.3
    seq = torch.sin(phase + t)  # (8, 21)
    h = torch.zeros(8, 32)
    optimizer.zero_grad()
    for k in range(20):
        h = cell(seq[:, k:k + 1], h)
        loss = loss_fn(head(h), seq[:, k + 1:k + 2])
        loss.backward(retain_graph=True)
    optimizer.step()
    if it % 50 == 0:
        print(f"iter {it} loss {loss.item():.4f}")
