"""A small U-Net-like segmenter trained with batch size 2 on 64x64 masks, BatchNorm after every convolution (the
usual design for segmentation at high resolution): each BatchNorm sees thousands of values per channel."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class Blobs(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.centers = torch.randint(12, 52, (n, 2), generator=g)

    def __len__(self):
        return len(self.centers)

    def __getitem__(self, i):
        yy, xx = torch.meshgrid(torch.arange(64), torch.arange(64), indexing="ij")
        cy, cx = self.centers[i]
        mask = (((yy - cy) ** 2 + (xx - cx) ** 2) < 100).long()
        img = mask.float().unsqueeze(0) * 0.8 + 0.3 * torch.randn(1, 64, 64)
        return img, mask


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1, self.d2 = block(1, 8), block(8, 16)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.u1 = block(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        return self.out(self.u1(torch.cat([self.up(b), a], 1)))


model = UNet()
loader = DataLoader(Blobs(80), batch_size=2, shuffle=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    model.train()
    for img, mask in loader:
        loss = F.cross_entropy(model(img), mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")
