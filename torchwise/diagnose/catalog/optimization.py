"""Catalog entries for mistakes in the optimization: gradients, the optimizer and its learning rate, schedulers, clipping."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry, entry

ENTRIES: list[Entry] = [
    entry("missing-zero-grad", "error", "Gradients are never cleared between optimizer steps",
          "backward() adds to .grad; without zero_grad() every step uses the sum of all past gradients, "
          "so updates grow and point the wrong way.",
          """
for x, y in loader:
    optimizer.zero_grad()          # clear the previous step's gradients
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
    entry("params-not-in-optimizer", "error", "Some trainable parameters are not in the optimizer",
          "They receive gradients but are never updated, usually because a layer was replaced or added "
          "after the optimizer was created.",
          """
model.fc = nn.Linear(512, num_classes)          # change the model first ...
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # ... then build the optimizer
# to freeze a part on purpose: p.requires_grad_(False) for its parameters
"""),
    entry("no-gradient-flow", "error", "Parameters receive no gradient",
          "The computation graph is cut before them (.detach(), .item(), .numpy(), .data, torch.tensor(...) "
          "on an intermediate result), they are not used in forward, or zero_grad() runs between "
          "backward() and step(): these parameters never learn.",
          """
h = self.encoder(x)                # keep the result in the graph: no .detach()/.item()/.numpy()/.data
out = self.head(h)
loss.backward()
optimizer.step()
optimizer.zero_grad()              # clear after step() (or before forward), never between backward and step
"""),
    entry("lr-too-high", "warning", "Learning rate too high: the loss diverges",
          "Each step moves the weights by a large fraction of their size, so the loss jumps around or "
          "explodes instead of going down.",
          """
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
# find a good value: `torchwise lr-find`, then use ~1/10 of the loss minimum
"""),
    entry("lr-too-low", "warning", "Learning rate too low: the weights barely move",
          "Each step changes the weights by less than a millionth of their size; the loss stays flat and "
          "training wastes its time.",
          """
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
"""),
    entry("exploding-gradients", "warning", "Gradients explode",
          "Gradients far larger than the weights make updates that throw the weights away; typical of deep "
          "or recurrent networks with a bad initialization or no normalization.",
          """
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
optimizer.step()
# and use a sane init (nn.init.kaiming_normal_ for ReLU nets) / normalization layers / a lower lr
"""),
    entry("vanishing-gradients", "warning", "Gradients vanish in the first layers",
          "The first layers get gradients thousands of times smaller (relative to their weights) than the "
          "last ones, so they barely learn; typical of deep stacks of sigmoid/tanh.",
          """
nn.Sequential(nn.Linear(d, h), nn.ReLU(), ...)    # ReLU/GELU instead of Sigmoid/Tanh between layers
# add normalization (nn.BatchNorm1d / nn.LayerNorm) or residual connections; init with nn.init.kaiming_normal_
"""),
    entry("nonfinite-loss", "error", "The loss became NaN or infinite",
          "Once a NaN reaches the weights every later step is garbage; it comes from an operation that "
          "overflows or is undefined (log of 0, division by 0, sqrt of a negative) or from a too high "
          "learning rate.",
          """
out = torch.log(x.clamp_min(1e-8))         # guard log/div/sqrt inputs
out = x / (x.sum(dim=1, keepdim=True) + 1e-8)
torch.autograd.set_detect_anomaly(True)    # while debugging: names the operation that produced the NaN
"""),
    entry("loss-not-decreasing", "warning", "The training loss does not decrease",
          "After many steps the loss is where it started: the model learns nothing. Common causes: inputs "
          "and labels out of step (shuffled separately), a loss that does not fit the outputs, a wrong "
          "learning rate.",
          """
x, y = next(iter(train_loader)); print(x[:4], y[:4])   # do inputs and labels belong together?
perm = torch.randperm(len(x)); x, y = x[perm], y[perm]  # shuffle inputs and labels with ONE permutation
# then: `torchwise check --overfit python train.py` (can the model fit one batch?)
"""),
    entry("scheduler-stepped-per-batch", "error", "An epoch-based LR scheduler is stepped after every batch",
          "StepLR, MultiStepLR, ExponentialLR and CosineAnnealingLR count epochs: step_size, milestones and "
          "T_max are in epochs. Stepped per batch, the schedule runs hundreds of times too fast: the learning "
          "rate collapses (or the cosine cycles) within the first epoch and training stalls.",
          """
for epoch in range(epochs):
    for x, y in train_loader:
        ...
        optimizer.step()
    scheduler.step()               # once per epoch, after the epoch's optimizer steps
# per-batch schedules are OneCycleLR / LinearLR with total_steps = epochs * len(train_loader)
"""),
    entry("plateau-on-train-loss", "warning", "ReduceLROnPlateau is fed a training metric",
          "ReduceLROnPlateau lowers the LR when its metric stops improving; the training loss keeps "
          "improving while the model overfits, and per-batch losses are noise, so the LR drops at the "
          "wrong times or never.",
          """
val_loss = evaluate(model, val_loader)   # under model.eval() and torch.no_grad()
scheduler.step(val_loss)                 # once per epoch, with the validation metric
"""),
    entry("clip-scaled-gradients", "error", "Gradients are clipped while still multiplied by the AMP loss scale",
          "GradScaler multiplies the loss (and so every gradient) by a scale of about 65536; clipping "
          "before scaler.unscale_(optimizer) compares that inflated norm with your max_norm, so every step "
          "is clipped to a tiny fraction of its real size.",
          """
scaler.scale(loss).backward()
scaler.unscale_(optimizer)                                   # true gradients first
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
"""),
    entry("clip-has-no-effect", "error", "Gradient clipping runs where it cannot change the update",
          "clip_grad_norm_ only changes the gradients that the next optimizer.step() uses: called after "
          "step() (or after zero_grad()) it clips gradients that are already used or gone.",
          """
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)   # after backward ...
optimizer.step()                                                   # ... before step
"""),
    entry("accumulation-unscaled", "warning", "Gradient accumulation sums unscaled losses",
          "backward() adds gradients up: with k batches accumulated per optimizer step and each loss not "
          "divided by k, every step uses k times the mean gradient, which is the same as a k times larger "
          "learning rate (and makes the LR depend on the accumulation setting).",
          """
accum = 4
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum      # each batch counts 1/accum of the step
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    entry("cannot-overfit-batch", "warning", "The model cannot fit a single small batch",
          "A working model/loss pair drives the loss on one small batch close to zero in a few hundred "
          "steps; if it cannot, a long run will not help: look at the model, the loss and the labels first.",
          """
x, y = next(iter(train_loader))
for _ in range(300):                       # the sanity check torchwise ran
    optimizer.zero_grad(); loss = criterion(model(x), y); loss.backward(); optimizer.step()
print(loss.item())                         # should be close to 0
"""),
]
