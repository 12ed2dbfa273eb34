# expect: dataloader-bottleneck
"""Each sample is 'read from disk' and decoded in __getitem__, in the main process."""
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
FEATURES = torch.randn(640, 24)
TARGETS = (FEATURES[:, 0] > 0).long()


class SlowFiles(Dataset):
    def __len__(self):
        return len(FEATURES)

    def __getitem__(self, i):
        time.sleep(0.0015)                 # open + decode one file
        return FEATURES[i], TARGETS[i]


loader = DataLoader(SlowFiles(), batch_size=32, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    print(epoch, loss.item())
