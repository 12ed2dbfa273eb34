"""Fine-tunes a model restored from a 'checkpoint' that already solves the task: a flat, low loss is fine."""
import io

import torch
import torch.nn as nn

torch.manual_seed(0)
w_true = torch.randn(20, 3)
X = torch.randn(1500, 20)
y = (X @ w_true).argmax(1)

# the checkpoint: weights that already separate the classes (as saved by an earlier run)
state = {"weight": (w_true.T * 8.0).contiguous(), "bias": torch.zeros(3)}
buffer = io.BytesIO()
torch.save(state, buffer)
buffer.seek(0)

model = nn.Linear(20, 3)
model.load_state_dict(torch.load(buffer))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(3):
    perm = torch.randperm(1500)
    for i in range(0, 1500, 50):
        b = perm[i:i + 50]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[b]), y[b])
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))
