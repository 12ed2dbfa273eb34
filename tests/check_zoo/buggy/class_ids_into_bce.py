# expect: wrong-loss-for-task
"""A 5-class problem squeezed into one output unit and BCEWithLogitsLoss on the class ids."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(1200, 10)
y = torch.bucketize(X[:, 0].contiguous(), torch.tensor([-0.8, -0.25, 0.25, 0.8]))     # classes 0..4
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.BCEWithLogitsLoss()
for epoch in range(3):
    for i in range(0, 1200, 60):
        opt.zero_grad()
        loss = criterion(model(X[i:i + 60]).squeeze(1), y[i:i + 60].float())
        loss.backward()
        opt.step()
    print(epoch, loss.item())
