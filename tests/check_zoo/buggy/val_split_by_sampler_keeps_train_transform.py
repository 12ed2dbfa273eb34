# expect: val-augmentation
"""The validation split is a SubsetRandomSampler over the training dataset itself, so validation images
go through the training transform (random flips and noise)."""
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, Dataset, SubsetRandomSampler

torch.manual_seed(0)
d = load_digits()
images = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
labels = torch.tensor(d.target)


class Augmented(Dataset):
    def __len__(self):
        return len(images)

    def __getitem__(self, i):
        img = images[i]
        if torch.rand(1).item() < 0.5:
            img = torch.flip(img, dims=[2])
        return (img + 0.05 * torch.randn_like(img) - 0.3) / 0.4, labels[i]


data = Augmented()
order = torch.randperm(len(data)).tolist()
train_idx, val_idx = order[:1500], order[1500:]
train_loader = DataLoader(data, batch_size=64, sampler=SubsetRandomSampler(train_idx))
val_loader = DataLoader(data, batch_size=128, sampler=SubsetRandomSampler(val_idx))
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
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / len(val_idx)
    print(epoch, acc)
