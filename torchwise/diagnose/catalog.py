"""The catalog of silent training mistakes torchwise can find.

One entry per mistake id: a short title, what it is, why it matters and the fix as code.
The detectors live in `torchwise.diagnose.checks` and only add the evidence (numbers) and
the place in the user's code; everything a person reads about a mistake comes from here,
so the Trainer, `torchwise.watch` and `torchwise check` all word it the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    id: str
    severity: str  # "error": the result is wrong; "warning": the result is likely poor or slow;
    #                "info": a hint that may be by design (a finding carries why it may be fine)
    title: str
    why: str
    fix: str
    maybe_fine: str = ""  # an "info" entry: why what it reports may be by design


def _e(id: str, severity: str, title: str, why: str, fix: str, maybe_fine: str = "") -> Entry:
    return Entry(id, severity, title, why, fix.strip("\n"), maybe_fine)


CATALOG: dict[str, Entry] = {e.id: e for e in [
    _e("missing-zero-grad", "error", "Gradients are never cleared between optimizer steps",
       "backward() adds to .grad; without zero_grad() every step uses the sum of all past gradients, "
       "so updates grow and point the wrong way.",
       """
for x, y in loader:
    optimizer.zero_grad()          # clear the previous step's gradients
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
    _e("eval-mode-missing", "error", "Validation runs with the model in training mode",
       "In training mode Dropout drops units at random and BatchNorm uses (and updates) the statistics "
       "of the current batch, so validation numbers are noisy and too pessimistic.",
       """
model.eval()                       # Dropout off, BatchNorm uses running statistics
with torch.no_grad():
    for x, y in val_loader:
        ...
model.train()                      # back to training mode before the next epoch
"""),
    _e("train-mode-missing", "error", "Training runs with the model in eval mode",
       "After model.eval() (usually in a validation function) Dropout stays off and BatchNorm stops "
       "learning its statistics until model.train() is called again.",
       """
for epoch in range(epochs):
    model.train()                  # at the start of every epoch, after any validation
    for x, y in train_loader:
        ...
"""),
    _e("softmax-before-loss", "error", "Probabilities (softmax output) are fed to a loss that expects logits",
       "CrossEntropyLoss applies log_softmax itself; feeding it softmax outputs squashes the gradients "
       "and training stalls at a mediocre accuracy.",
       """
logits = model(x)                  # no softmax in the model's forward
loss = F.cross_entropy(logits, y)  # or nn.CrossEntropyLoss()(logits, y)
probs = logits.softmax(dim=1)      # only where you need probabilities (prediction)
"""),
    _e("log-softmax-into-cross-entropy", "info", "cross_entropy is given log-probabilities (a log_softmax output)",
       "cross_entropy (nn.CrossEntropyLoss) applies log_softmax itself. log_softmax is idempotent (the logsumexp of "
       "log-probabilities is 0), so cross_entropy(log_softmax(x)) equals cross_entropy(x) in value and in gradient: "
       "the second log_softmax is redundant, not wrong. It usually means a model written for nll_loss is trained "
       "with cross_entropy, and its outputs are log-probabilities where a reader expects logits.",
       """
def forward(self, x):
    return self.fc(x)              # raw scores: cross_entropy applies log_softmax itself
loss = F.cross_entropy(model(x), y)
# or keep log_softmax in forward and use the loss written for it:
loss = F.nll_loss(model(x), y)     # nll_loss(log_softmax(x), y) == cross_entropy(x, y)
"""),
    _e("double-sigmoid", "error", "Sigmoid applied before BCEWithLogitsLoss",
       "BCEWithLogitsLoss applies the sigmoid itself; a second sigmoid squeezes its input into (0, 1), "
       "so predictions can never be confident and the gradients are tiny.",
       """
logits = model(x)                  # no sigmoid at the end of the model
loss = F.binary_cross_entropy_with_logits(logits, y)
probs = torch.sigmoid(logits)      # only for prediction
"""),
    _e("labels-not-zero-based", "error", "Class labels start at 1, not 0",
       "CrossEntropyLoss expects labels 0..C-1. With labels 1..C the output for class 0 is never trained "
       "and every class index is shifted by one.",
       """
y = y - 1                          # or: encode labels once, e.g. {label: i for i, label in enumerate(sorted(set(labels)))}
model = Net(num_classes=num_classes)   # num_classes = number of distinct labels
"""),
    _e("output-classes-mismatch", "error", "The model has more outputs than the data has classes",
       "Extra outputs never see a positive example; they waste capacity and make the predicted class "
       "distribution wrong (and usually betray a copy-pasted head, e.g. 100 classes for 10-class data).",
       """
num_classes = int(y_train.max()) + 1        # or len(dataset.classes)
model.fc = nn.Linear(in_features, num_classes)
"""),
    _e("wrong-loss-for-task", "error", "The loss function does not fit the task",
       "Regression losses on class labels treat classes as ordered numbers; cross entropy on a single "
       "output or on continuous targets cannot learn anything.",
       """
# classification (integer labels 0..C-1):  model outputs C logits
loss = F.cross_entropy(logits, y)
# binary / multi-label (0/1 targets):        one logit per label
loss = F.binary_cross_entropy_with_logits(logits, y.float())
# regression (real-valued targets):
loss = F.mse_loss(pred.squeeze(-1), y)
"""),
    _e("params-not-in-optimizer", "error", "Some trainable parameters are not in the optimizer",
       "They receive gradients but are never updated, usually because a layer was replaced or added "
       "after the optimizer was created.",
       """
model.fc = nn.Linear(512, num_classes)          # change the model first ...
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # ... then build the optimizer
# to freeze a part on purpose: p.requires_grad_(False) for its parameters
"""),
    _e("unregistered-submodules", "error", "Layers kept in a plain Python list or dict are not part of the model",
       "nn.Module only registers sub-modules assigned as attributes or held in nn.ModuleList/ModuleDict; "
       "layers in a list are missing from model.parameters(), so the optimizer never updates them, "
       "and .to(device), .eval() and state_dict() skip them.",
       """
self.blocks = nn.ModuleList([Block(d) for _ in range(n)])   # not [Block(d) for _ in range(n)]
self.heads = nn.ModuleDict({"a": nn.Linear(d, 2)})          # not {"a": nn.Linear(d, 2)}
"""),
    _e("no-gradient-flow", "error", "Parameters receive no gradient",
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
    _e("loss-retains-graph", "error", "Loss tensors are kept with their whole computation graph",
       "Storing `loss` (not `loss.item()`) in a list or a running sum keeps every step's graph and "
       "activations alive: memory grows each step until it runs out.",
       """
running_loss += loss.item()        # a Python float, not the tensor
losses.append(loss.item())         # or loss.detach()
"""),
    _e("lr-too-high", "warning", "Learning rate too high: the loss diverges",
       "Each step moves the weights by a large fraction of their size, so the loss jumps around or "
       "explodes instead of going down.",
       """
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
# find a good value: `torchwise lr-find`, then use ~1/10 of the loss minimum
"""),
    _e("lr-too-low", "warning", "Learning rate too low: the weights barely move",
       "Each step changes the weights by less than a millionth of their size; the loss stays flat and "
       "training wastes its time.",
       """
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
"""),
    _e("exploding-gradients", "warning", "Gradients explode",
       "Gradients far larger than the weights make updates that throw the weights away; typical of deep "
       "or recurrent networks with a bad initialization or no normalization.",
       """
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
optimizer.step()
# and use a sane init (nn.init.kaiming_normal_ for ReLU nets) / normalization layers / a lower lr
"""),
    _e("vanishing-gradients", "warning", "Gradients vanish in the first layers",
       "The first layers get gradients thousands of times smaller (relative to their weights) than the "
       "last ones, so they barely learn; typical of deep stacks of sigmoid/tanh.",
       """
nn.Sequential(nn.Linear(d, h), nn.ReLU(), ...)    # ReLU/GELU instead of Sigmoid/Tanh between layers
# add normalization (nn.BatchNorm1d / nn.LayerNorm) or residual connections; init with nn.init.kaiming_normal_
"""),
    _e("dead-relu", "warning", "Most ReLU units are dead (output 0 for every input)",
       "A dead unit outputs 0 for all inputs and gets no gradient, so it never recovers; usually caused "
       "by a too high learning rate or a large negative bias.",
       """
nn.init.kaiming_normal_(layer.weight, nonlinearity="relu"); nn.init.zeros_(layer.bias)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)    # lower the learning rate
act = nn.LeakyReLU(0.01)                                      # or an activation without a dead zone
"""),
    _e("nonfinite-loss", "error", "The loss became NaN or infinite",
       "Once a NaN reaches the weights every later step is garbage; it comes from an operation that "
       "overflows or is undefined (log of 0, division by 0, sqrt of a negative) or from a too high "
       "learning rate.",
       """
out = torch.log(x.clamp_min(1e-8))         # guard log/div/sqrt inputs
out = x / (x.sum(dim=1, keepdim=True) + 1e-8)
torch.autograd.set_detect_anomaly(True)    # while debugging: names the operation that produced the NaN
"""),
    _e("nonfinite-input", "error", "The data contains NaN or infinite values",
       "A single NaN in a batch makes the loss NaN and, after one step, the weights.",
       """
x = torch.nan_to_num(x, nan=0.0)           # or impute missing values (e.g. with the train-split mean)
assert torch.isfinite(x).all(), "data contains NaN/inf"
"""),
    _e("unnormalized-input", "warning", "Inputs are not normalized",
       "Inputs with large values or wildly different feature scales make the first layer's gradients huge "
       "and training slow or unstable.",
       """
mean, std = x_train.mean(0), x_train.std(0) + 1e-8     # statistics of the TRAIN split only
x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
# images: transforms.ToTensor() (0..1) + transforms.Normalize(mean, std)
"""),
    _e("loss-not-decreasing", "warning", "The training loss does not decrease",
       "After many steps the loss is where it started: the model learns nothing. Common causes: inputs "
       "and labels out of step (shuffled separately), a loss that does not fit the outputs, a wrong "
       "learning rate.",
       """
x, y = next(iter(train_loader)); print(x[:4], y[:4])   # do inputs and labels belong together?
perm = torch.randperm(len(x)); x, y = x[perm], y[perm]  # shuffle inputs and labels with ONE permutation
# then: `torchwise check --overfit python train.py` (can the model fit one batch?)
"""),
    _e("val-augmentation", "error", "Random augmentation is applied to validation data",
       "The same validation sample looks different on every pass, so validation metrics are noisy and "
       "too low; validation data must be deterministic.",
       """
train_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
val_tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), normalize])  # no random ops
val_set = MyDataset(val_files, transform=val_tf)
"""),
    _e("train-val-overlap", "error", "Validation samples also appear in the training data",
       "The model is scored on samples it trained on, so validation metrics are optimistic and "
       "over-fitting goes unnoticed.",
       """
perm = torch.randperm(len(x))
train_idx, val_idx = perm[:n_train], perm[n_train:]       # disjoint index sets
# or: train_set, val_set = torch.utils.data.random_split(dataset, [n_train, n_val])
"""),
    _e("no-shuffle", "warning", "Training batches are not shuffled (they are sorted by label)",
       "Batches that contain one class at a time make the model chase the current class; the loss "
       "oscillates and the final model favours the last classes seen.",
       """
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
# plain tensors: perm = torch.randperm(len(x)) each epoch and slice x[perm], y[perm]
"""),
    _e("sampler-epoch-not-set", "error", "DistributedSampler.set_epoch() is never called",
       "Without set_epoch(epoch) the sampler shuffles with the same seed every epoch, so every epoch "
       "sees the data in exactly the same order.",
       """
for epoch in range(epochs):
    sampler.set_epoch(epoch)       # before iterating the loader each epoch
    for x, y in loader:
        ...
"""),
    _e("dataloader-bottleneck", "warning", "Training waits for the data loader",
       "Most of each step is spent producing the batch, so the model (and the GPU) sits idle.",
       """
loader = DataLoader(ds, batch_size=64, shuffle=True,
                    num_workers=4, persistent_workers=True)   # load in parallel processes
# and move expensive, fixed preprocessing out of __getitem__ (do it once, cache the result)
"""),
    _e("pin-memory-misuse", "warning", "pin_memory=True while training on the CPU",
       "Pinned (page-locked) memory only speeds up copies to a GPU; on a CPU-only run it costs time "
       "and locks RAM for nothing.",
       """
use_cuda = torch.cuda.is_available()
loader = DataLoader(ds, batch_size=64, shuffle=True, pin_memory=use_cuda)
"""),
    _e("bn-small-batch", "warning", "BatchNorm trained with very small batches",
       "BatchNorm estimates mean and variance from the batch; with a few samples these estimates are "
       "noise, training is unstable and eval-mode results differ from training.",
       """
loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)   # larger batches
# or replace BatchNorm with a batch-size-independent norm:
nn.GroupNorm(num_groups=8, num_channels=c)      # conv nets;  nn.LayerNorm(d) for MLPs
"""),
    _e("label-imbalance", "warning", "Classes are heavily imbalanced and the loss is not weighted",
       "With a class that is 10x rarer than another, the model can reach a low loss by ignoring it.",
       """
counts = torch.bincount(y_train, minlength=num_classes).float()
criterion = nn.CrossEntropyLoss(weight=counts.sum() / (len(counts) * counts))
# the same: nn.CrossEntropyLoss(weight=torchwise.class_weights(y_train));  CLI: --set train.class_weights=balanced
# or sample balanced batches: WeightedRandomSampler(weights=1.0 / counts[y_train], num_samples=len(y_train))
"""),
    _e("scheduler-stepped-per-batch", "error", "An epoch-based LR scheduler is stepped after every batch",
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
    _e("plateau-on-train-loss", "warning", "ReduceLROnPlateau is fed a training metric",
       "ReduceLROnPlateau lowers the LR when its metric stops improving; the training loss keeps "
       "improving while the model overfits, and per-batch losses are noise, so the LR drops at the "
       "wrong times or never.",
       """
val_loss = evaluate(model, val_loader)   # under model.eval() and torch.no_grad()
scheduler.step(val_loss)                 # once per epoch, with the validation metric
"""),
    _e("clip-scaled-gradients", "error", "Gradients are clipped while still multiplied by the AMP loss scale",
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
    _e("clip-has-no-effect", "error", "Gradient clipping runs where it cannot change the update",
       "clip_grad_norm_ only changes the gradients that the next optimizer.step() uses: called after "
       "step() (or after zero_grad()) it clips gradients that are already used or gone.",
       """
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)   # after backward ...
optimizer.step()                                                   # ... before step
"""),
    _e("ddp-no-distributed-sampler", "error", "Distributed training without a DistributedSampler",
       "Every process iterates the whole data set in the same order, so the N GPUs compute the same "
       "batches: N times the cost for the speed of one, and each epoch is really N epochs.",
       """
sampler = DistributedSampler(train_ds, shuffle=True)        # each rank gets its own 1/N share
loader = DataLoader(train_ds, batch_size=64, sampler=sampler)   # no shuffle=True with a sampler
for epoch in range(epochs):
    sampler.set_epoch(epoch)
"""),
    _e("cannot-overfit-batch", "warning", "The model cannot fit a single small batch",
       "A working model/loss pair drives the loss on one small batch close to zero in a few hundred "
       "steps; if it cannot, a long run will not help: look at the model, the loss and the labels first.",
       """
x, y = next(iter(train_loader))
for _ in range(300):                       # the sanity check torchwise ran
    optimizer.zero_grad(); loss = criterion(model(x), y); loss.backward(); optimizer.step()
print(loss.item())                         # should be close to 0
"""),
    _e("symmetric-init", "error", "Hidden units start identical and stay identical (constant initialization)",
       "When every unit of a layer starts with the same weights, every unit computes the same output and "
       "gets the same gradient, so they never become different: a layer of 128 units learns like a layer "
       "of one. Random initialization is what breaks this symmetry.",
       """
# keep PyTorch's default (random) initialization, or use a random scheme:
for m in model.modules():
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")   # not zeros_/constant_
        nn.init.zeros_(m.bias)                                     # constant biases are fine
# a zero-initialized *last* layer is fine when the layers before it are random
"""),
    _e("compare-values-not-indices", "error", "Accuracy compares the max values, not the predicted classes",
       "torch.max(out, dim) and out.topk(k, dim) return (values, indices); the values are scores such as "
       "3.27, which almost never equal an integer label, so the accuracy reads near 0 (or noise) whatever "
       "the model learned.",
       """
_, pred = torch.max(out, 1)        # the second result holds the class indices
pred = out.argmax(dim=1)           # or simply this
correct += (pred == y).sum().item()
"""),
    _e("eval-without-no-grad", "info", "Evaluation forwards build an autograd graph that is never used",
       "Without torch.no_grad() (or torch.inference_mode()) every forward keeps its activations for a "
       "backward() that never comes: evaluation takes about twice the memory (a common cause of CUDA "
       "out-of-memory in the validation loop) and runs slower.",
       """
model.eval()
with torch.no_grad():              # or torch.inference_mode()
    for x, y in val_loader:
        val_loss += criterion(model(x), y).item()
model.train()
""", maybe_fine="The results are the same with or without no_grad: only memory and time are spent. For a few "
                "forwards (a shape check, a sample generated now and then, a full-graph evaluation no larger than "
                "a training step) that cost is small."),
    _e("accumulation-unscaled", "warning", "Gradient accumulation sums unscaled losses",
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
    _e("backward-in-autocast", "warning", "backward() or optimizer.step() runs inside the autocast block",
       "autocast is meant to wrap the forward pass and the loss computation only: the PyTorch AMP documentation "
       "advises against running backward under it. In eager mode it buys nothing (each backward op already runs in "
       "the dtype autocast chose for its forward op), and it can cost: torch.compile'd regions trace their backward "
       "under the forward's autocast, which has overflowed in fp16 where the eager backward did not (pytorch issue "
       "153044), and whatever autocast-eligible work the update path does (a custom optimizer's or a clipping "
       "helper's matmuls, metrics computed with matmuls) runs in reduced precision.",
       """
with torch.autocast("cuda", dtype=torch.bfloat16):   # the forward pass and the loss only
    loss = criterion(model(x), y)
loss.backward()                                     # after the block: backward ...
optimizer.step()                                    # ... and the update in full precision
# fp16 with a GradScaler, the same way: scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
"""),
    _e("loss-average-wrong-count", "warning", "The epoch's average loss is divided by the wrong count",
       "The loss the script reports for an epoch is its sum divided by a count that does not match the sum: "
       "len(loader.dataset) while a sampler (SubsetRandomSampler, DistributedSampler) drew fewer samples, the "
       "number of samples for a sum of per-batch means, or the number of batches for a sum of loss x batch "
       "size. Training is unaffected, but the reported number is off by a constant factor, so it cannot be "
       "compared with a validation loss or another run, and early stopping or model selection on it misleads.",
       """
total, seen = 0.0, 0
for x, y in loader:
    loss = criterion(model(x), y)        # a mean over the batch
    ...
    total += loss.item() * x.size(0)     # back to a sum over the batch's samples
    seen += x.size(0)                    # the samples this epoch really drew (not len(loader.dataset))
print("epoch loss", total / seen)
# or: a sum of per-batch means divided by the number of batches, total / len(loader)
"""),
    _e("cudnn-benchmark-varying-shapes", "warning", "cudnn.benchmark is on while the input shapes keep changing",
       "With torch.backends.cudnn.benchmark = True, cuDNN times every convolution algorithm the first time it meets "
       "an input shape and keeps the fastest. With fixed shapes that one search makes the run 5-20% faster; with "
       "shapes that keep changing (texts of different lengths, images of different sizes) it searches again for "
       "every new shape, and the run gets slower instead. The cost is paid on a GPU: on the CPU the flag does nothing.",
       """
torch.backends.cudnn.benchmark = False   # input sizes vary: leave benchmark mode off (its default)
# or keep it on and make the shapes fixed: pad every text to one length (or to a few bucket lengths)
x = nn.functional.pad(x, (0, max_len - x.shape[1]), value=pad_id)
"""),
]}


# How each mistake is detected at run time (never from names, comments or file names).
DETECTED_BY: dict[str, str] = {
    "missing-zero-grad": "a tensor hook sees a new gradient arrive while .grad still holds the one step() already used, "
                         "and the next step() of that optimizer uses it",
    "eval-mode-missing": "a forward under no_grad, or over a loader that runs no optimizer step, with model.training "
                         "True in a model that has Dropout/BatchNorm",
    "train-mode-missing": "forward passes with gradients in eval mode, followed by optimizer.step()",
    "softmax-before-loss": "the cross_entropy/nll_loss input is in [0, 1] and sums to 1 over the class dim (or over "
                           "another dim), or is exactly 1 (0) everywhere: a softmax (log_softmax) over a dim of size 1",
    "log-softmax-into-cross-entropy": "every value of the cross_entropy input is <= 0 and its logsumexp over the class "
                                      "dim is 0 (a log_softmax output), in 80% of 2+ checked calls",
    "double-sigmoid": "the autograd node that made the input of binary_cross_entropy_with_logits (seen through "
                      "views, indexing and casts) is a sigmoid; for binary_cross_entropy, a sigmoid of a sigmoid",
    "labels-not-zero-based": "the class-index targets of cross_entropy never contain 0; the others are contiguous",
    "output-classes-mismatch": "labels 0..k-1 seen with C > k outputs, and the chance that the C-k others are classes "
                               "(each at least a tenth as common as the rarest seen) none of which appeared among the "
                               "labels is below 1e-6; not for next-token (language-model) targets",
    "wrong-loss-for-task": "the loss's inputs/targets: MSE/L1 on integer class labels, BCE on class ids, cross_entropy "
                           "on one output or real targets, nll_loss on positive values, MSE shapes that broadcast",
    "params-not-in-optimizer": "parameters of a called model that have .grad at step() but are in no optimizer",
    "unregistered-submodules": "a module with parameters runs inside a model's forward but is not in model.modules()",
    "no-gradient-flow": "optimizer parameters whose .grad is None at every checked step()",
    "loss-retains-graph": "a backward()'ed loss added into a total made at an earlier step, or loss tensors alive 3+ "
                          "steps after their backward()",
    "lr-too-high": "weight update / weight norm per step, together with a loss that rises above its first value",
    "lr-too-low": "update / weight norm below 1e-4 per step, healthy (>= 1e-3) at a usual lr for the optimizer's "
                  "kind, and a flat loss",
    "exploding-gradients": "gradient norm / weight norm per tensor, per unit of loss, with a symptom (non-finite "
                           "values, a rising loss, an update larger than the weights)",
    "vanishing-gradients": "first-layer vs last-layer (gradient norm / weight norm), at sampled steps",
    "dead-relu": "share of ReLU units whose output is 0 for every sample of consecutive sampled batches (8+ samples "
                 "pooled)",
    "nonfinite-loss": "isfinite on the loss; then on every module output and operation to name where NaN/inf starts",
    "nonfinite-input": "isfinite on model inputs and loss targets",
    "unnormalized-input": "mean / standard deviation / per-feature scale of model inputs in training",
    "loss-not-decreasing": "last quarter vs first tenth of each optimizer's losses; stopped runs need a clear absence "
                           "of progress at the loss's noise (slope, 2 s.e.)",
    "val-augmentation": "the same validation item read twice (random state restored) differs",
    "train-val-overlap": "hashes of evaluated samples found among the hashes of trained samples; for one input shared "
                         "by index masks (loss on out[idx_train], evaluation on out[idx_val]), the evaluated output "
                         "rows vs the rows the training loss uses",
    "no-shuffle": "the share of training batches that contain a single class",
    "sampler-epoch-not-set": "DistributedSampler.epoch unchanged between iterations of its loader",
    "dataloader-bottleneck": "time waiting in the loader's __next__ vs the whole step",
    "pin-memory-misuse": "pin_memory=True on a loader while every model parameter is on the CPU",
    "bn-small-batch": "per BatchNorm layer in training: the batch size and the values per channel (batch x "
                      "positions); fewer than 8 samples and fewer than 64 values per channel",
    "label-imbalance": "class counts of the loss targets with no class weights: a warning when the model predicted the "
                       "rare class for none of its samples in the last 10 checked batches, else an info hint; not for "
                       "next-token (language-model) targets",
    "scheduler-stepped-per-batch": "StepLR/MultiStepLR/ExponentialLR/CosineAnnealingLR stepped several times per "
                                   "training pass, with a schedule shorter than one epoch or an LR spent (< 1/100) "
                                   "within the first half of the run",
    "plateau-on-train-loss": "ReduceLROnPlateau.step(metric) with no evaluation pass since its previous call",
    "clip-scaled-gradients": "clip_grad_norm_/clip_grad_value_ on gradients of a GradScaler-scaled backward before "
                             "scaler.unscale_() of their optimizer",
    "clip-has-no-effect": "clip_grad_norm_/clip_grad_value_ after optimizer.step() (before the next backward), or on "
                          "parameters whose .grad is None",
    "ddp-no-distributed-sampler": "a training loader without a DistributedSampler iterated while a process group "
                                  "of 2+ ranks is up",
    "cannot-overfit-batch": "a copy of the model trained on the first batch only (--overfit)",
    "symmetric-init": "a hidden Linear/Conv layer (not the model's last) whose weight rows and biases are all equal "
                      "at the first checked step and still equal 3+ optimizer steps later",
    "compare-values-not-indices": "eq/ne between the values of max/topk over a dim of a model output and an integer "
                                  "tensor",
    "eval-without-no-grad": "a model forward with gradients enabled whose graph no backward() reaches within the "
                            "next 2 optimizer steps",
    "accumulation-unscaled": "k > 1 backward() calls between two steps of one optimizer, each on a new batch (new "
                             "loader batch, or new input values for its models) and on the loss function's output "
                             "itself",
    "backward-in-autocast": "torch.is_autocast_enabled(device type) is True, for the loss's device, when backward() "
                            "starts, or for the parameters' device when optimizer.step() starts",
    "loss-average-wrong-count": "after each training pass over a loader, the numbers the script printed (4+ "
                                "significant digits) against the averages its backward() losses and batch sizes "
                                "give: equal to a wrong count's (len(dataset) vs the sampler's draw, samples vs "
                                "batches), equal to no right one's, 10%+ apart, in 2 epochs (or 1 with 6+ digits)",
    "cudnn-benchmark-varying-shapes": "torch.backends.cudnn.benchmark read at each training forward of a model with "
                                      "convolution layers; more than 8 different per-sample input shapes (the batch "
                                      "dimension left out) while it was True",
}


SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    """One mistake found in one place, worded for a person."""

    id: str
    message: str                       # one sentence with the numbers
    where: str | None = None           # "train.py:42" in the user's code
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: str = ""
    title: str = ""
    fix: str = ""
    why: str = ""
    maybe_fine: str = ""               # an "info" hint: why this may be by design

    def __post_init__(self) -> None:
        entry = CATALOG[self.id]
        self.severity = self.severity or entry.severity
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        self.title = self.title or entry.title
        self.fix = self.fix or entry.fix
        self.why = self.why or entry.why
        if self.severity == "info" and not self.maybe_fine:
            self.maybe_fine = entry.maybe_fine

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "message": self.message,
                "where": self.where, "evidence": _jsonable(self.evidence), "why": self.why, "fix": self.fix,
                "detected_by": DETECTED_BY.get(self.id), "maybe_fine": self.maybe_fine or None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        """The inverse of to_dict (a finding reported by another process: a spawned worker, a rank)."""
        return cls(id=d["id"], message=d.get("message", ""), where=d.get("where"),
                   evidence=dict(d.get("evidence") or {}), severity=d.get("severity", ""),
                   title=d.get("title", ""), fix=d.get("fix", ""), why=d.get("why", ""),
                   maybe_fine=d.get("maybe_fine") or "")

    @property
    def counts(self) -> bool:
        """Whether it is a mistake (error/warning) rather than a hint that may be by design."""
        return self.severity != "info"

    def render(self) -> str:
        lines = [f"[{self.severity}] {self.id}: {self.title}"]
        if self.where:
            lines.append(f"  at {self.where}")
        lines.append(f"  {self.message}")
        if self.evidence:
            ev = ", ".join(f"{k}={_short(v)}" for k, v in self.evidence.items())
            lines.append(f"  evidence: {ev}")
        lines.append(f"  why it matters: {self.why}")
        if self.maybe_fine:
            lines.append(f"  may be fine: {self.maybe_fine}")
        lines.append("  fix:")
        lines.extend("      " + line for line in self.fix.splitlines())
        return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        items = [_short(x) for x in list(v)[:8]]
        return "[" + ", ".join(items) + (", ..." if len(v) > 8 else "") + "]"
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else str(v)
    if isinstance(v, (int, str, bool)) or v is None:
        return v
    return str(v)


def describe() -> str:
    """The catalog as text: `torchwise check --list`."""
    lines = []
    width = max(len(i) for i in CATALOG)  # the ids line up however long the longest one is
    for e in CATALOG.values():
        lines.append(f"{e.id:{width}s} {e.severity:8s} {e.title}")
        lines.append(f"{'':{width}s} detected by: {DETECTED_BY.get(e.id, '-')}")
    return "\n".join(lines)
