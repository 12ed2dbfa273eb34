# expect: val-augmentation
"""Custom image Dataset; the validation set is built with the training transform (random flips + noise)."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
d = load_digits()
images = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
labels = torch.tensor(d.target)


def train_transform(img):
    if torch.rand(1).item() < 0.5:
        img = torch.flip(img, dims=[2])
    return img + 0.05 * torch.randn_like(img)


class DigitImages(Dataset):
    def __init__(self, images, labels, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i]
        if self.transform is not None:
            img = self.transform(img)
        return (img - 0.3) / 0.4, self.labels[i]


train_set = DigitImages(images[:1500], labels[:1500], transform=train_transform)
val_set = DigitImages(images[1500:], labels[1500:], transform=train_transform)
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
val_loader = DataLoader(val_set, batch_size=128)
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 16, 10))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(2):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / len(val_set)
    print(epoch, acc)
