# info-ok: bn-small-batch
# info-ok: pin-memory-misuse
"""A small U-Net segmenter trained one image at a time (batch size 1, as segmentation of large images is usually
trained), BatchNorm after every convolution and pin_memory=True as written for a GPU machine: the 4x4 bottleneck's
BatchNorm sees 16 values per channel. Its statistics are noisy, not meaningless, and the loss falls."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class Blobs(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.centers = torch.randint(6, 26, (n, 2), generator=g)

    def __len__(self):
        return len(self.centers)

    def __getitem__(self, i):
        yy, xx = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
        cy, cx = self.centers[i]
        mask = (((yy - cy) ** 2 + (xx - cx) ** 2) < 30).long()
        img = mask.float().unsqueeze(0) * 0.8 + 0.3 * torch.randn(1, 32, 32)
        return img, mask


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1, self.d2, self.d3, self.d4 = block(1, 8), block(8, 16), block(16, 16), block(16, 16)
        self.u3, self.u2, self.u1 = block(32, 16), block(32, 8), block(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.d3(F.max_pool2d(b, 2))
        d = self.d4(F.max_pool2d(c, 2))                       # 4x4 at the bottom
        c = self.u3(torch.cat([F.interpolate(d, scale_factor=2.0), c], 1))
        b = self.u2(torch.cat([F.interpolate(c, scale_factor=2.0), b], 1))
        a = self.u1(torch.cat([F.interpolate(b, scale_factor=2.0), a], 1))
        return self.out(a)


model = UNet()
loader = DataLoader(Blobs(160), batch_size=1, shuffle=True, pin_memory=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    model.train()
    total = 0.0
    for img, mask in loader:
        loss = F.cross_entropy(model(img), mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} mean loss {total / len(loader):.3f}")
