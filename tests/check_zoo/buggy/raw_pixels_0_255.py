# expect: unnormalized-input
"""Images given to the network as raw 0..255 pixel values."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
d = load_digits()
pixels = (torch.tensor(d.images) * 255 / 16).to(torch.uint8)     # as loaded from PNG files
images = pixels.unsqueeze(1).float()
loader = DataLoader(TensorDataset(images, torch.tensor(d.target)), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
