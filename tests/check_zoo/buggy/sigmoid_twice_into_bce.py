# expect: double-sigmoid
"""A binary classifier whose forward ends in nn.Sigmoid, trained with BCELoss on torch.sigmoid(model(x)): the
probabilities go through a second sigmoid, so every prediction lies in (0.27, 0.73)."""
import torch
import torch.nn as nn

torch.manual_seed(5)
points = torch.randn(600, 2)
inside = (points.pow(2).sum(1) < 1.2).float()
model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())
bce = nn.BCELoss()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(5):
    order = torch.randperm(600)
    for i in range(0, 600, 30):
        idx = order[i:i + 30]
        prob = torch.sigmoid(model(points[idx])).view(-1)
        loss = bce(prob, inside[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("epoch", epoch, "loss", round(loss.item(), 4))
