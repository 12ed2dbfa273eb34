"""DataLoader with worker processes and persistent workers, plus a plateau scheduler and early stopping."""
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    X = torch.randn(1600, 12)
    y = X[:, 0] * 2 - X[:, 1] + 0.1 * torch.randn(1600)
    train = DataLoader(TensorDataset(X[:1280], y[:1280]), batch_size=64, shuffle=True,
                       num_workers=2, persistent_workers=True)
    val = DataLoader(TensorDataset(X[1280:], y[1280:]), batch_size=160)
    model = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
    best, best_state, bad = float("inf"), None, 0
    for epoch in range(6):
        model.train()
        for xb, yb in train:
            opt.zero_grad()
            loss = nn.functional.l1_loss(model(xb).squeeze(1), yb)
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            v = sum(nn.functional.l1_loss(model(xb).squeeze(1), yb, reduction="sum").item() for xb, yb in val) / 320
        sched.step(v)
        if v < best:
            best, best_state, bad = v, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad >= 2:
                break
        print(epoch, round(v, 4))
    model.load_state_dict(best_state)


if __name__ == "__main__":
    main()
