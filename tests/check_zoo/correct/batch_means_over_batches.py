"""A classifier whose epoch loss adds up the batches' mean losses (loss.item() of a mean-reduced
CrossEntropyLoss) and divides the total by the number of batches: the mean loss of the epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(11)
centers = torch.randn(4, 10) * 2
which = torch.randint(0, 4, (960,))
points = centers[which] + torch.randn(960, 10)
train_set, val_set = random_split(TensorDataset(points, which), [768, 192],
                                  generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
val_loader = DataLoader(val_set, batch_size=64)

net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
for epoch in range(3):
    net.train()
    epoch_loss = 0.0
    for batch_x, batch_y in train_loader:
        optimizer.zero_grad()
        loss = loss_fn(net(batch_x), batch_y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss.item()
    net.eval()
    val_loss = 0.0
    with torch.no_grad():
        for batch_x, batch_y in val_loader:
            val_loss += loss_fn(net(batch_x), batch_y).item()
    print(f"epoch {epoch + 1}  train {epoch_loss / len(train_loader):.6f}  "
          f"val {val_loss / len(val_loader):.6f}")
