"""Small CNN with BatchNorm on 8x8 digit images; functional cross entropy; SGD with momentum."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
d = load_digits()
images = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
images = (images - 0.3) / 0.4
labels = torch.tensor(d.target)
full = TensorDataset(images, labels)
train_set, val_set = random_split(full, [1500, len(full) - 1500], generator=torch.Generator().manual_seed(0))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.head = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(x.flatten(1))


def evaluate(model, loader):
    model.eval()
    hits = total = 0
    with torch.no_grad():
        for x, y in loader:
            hits += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return hits / total


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
train_loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
val_loader = DataLoader(val_set, batch_size=128)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print("epoch", epoch, "val acc", evaluate(model, val_loader))
