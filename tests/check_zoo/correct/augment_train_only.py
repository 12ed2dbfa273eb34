"""Random augmentation in training only (torchvision v2 transforms on tensors); validation is deterministic."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2 as T

torch.manual_seed(0)
d = load_digits()
imgs = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
ys = torch.tensor(d.target)
normalize = T.Normalize([0.3], [0.4])
train_tf = T.Compose([T.RandomCrop(8, padding=1), normalize])
val_tf = normalize


class Digits(Dataset):
    def __init__(self, x, y, tf):
        self.x, self.y, self.tf = x, y, tf

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.tf(self.x[i]), self.y[i]


train_loader = DataLoader(Digits(imgs[:1500], ys[:1500], train_tf), batch_size=64, shuffle=True,
                          num_workers=2, persistent_workers=True)
val_loader = DataLoader(Digits(imgs[1500:], ys[1500:], val_tf), batch_size=100)
model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Dropout(0.2), nn.Linear(16 * 16, 10))
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(2):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / 297
        train_acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in train_loader) / 1500
    print(epoch, round(train_acc, 3), acc)
