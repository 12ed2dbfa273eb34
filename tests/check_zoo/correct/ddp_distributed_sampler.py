"""Two-process DDP (gloo) on digits with a DistributedSampler and set_epoch, as it should be.

Rank 0 is this process; it starts rank 1 itself, so the script also runs as a plain `python script.py`.
"""
import datetime
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

child = None
if "RANK" in os.environ:  # under torchrun
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
else:
    if len(sys.argv) > 1:  # rank 1, started below
        rank, port = 1, int(sys.argv[1])
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        rank = 0
        child = subprocess.Popen([sys.executable, __file__, str(port)])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))  # a peer that never comes fails, not hangs
rank = dist.get_rank()

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X, dtype=torch.float32) / 16.0
y = torch.tensor(y)
ds = TensorDataset(X, y)
sampler = DistributedSampler(ds, shuffle=True)
loader = DataLoader(ds, batch_size=64, sampler=sampler)

model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(epoch, loss.item())
dist.destroy_process_group()
if child is not None:
    child.wait()
