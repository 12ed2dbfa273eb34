"""Catalog entries for mistakes in the model: its train/eval mode, its layers, its output size and initialization."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry, entry

ENTRIES: list[Entry] = [
    entry("eval-mode-missing", "error", "Validation runs with the model in training mode",
          "In training mode Dropout drops units at random and BatchNorm uses (and updates) the statistics "
          "of the current batch, so validation numbers are noisy and too pessimistic.",
          """
model.eval()                       # Dropout off, BatchNorm uses running statistics
with torch.no_grad():
    for x, y in val_loader:
        ...
model.train()                      # back to training mode before the next epoch
"""),
    entry("train-mode-missing", "error", "Training runs with the model in eval mode",
          "After model.eval() (usually in a validation function) Dropout stays off and BatchNorm stops "
          "learning its statistics until model.train() is called again.",
          """
for epoch in range(epochs):
    model.train()                  # at the start of every epoch, after any validation
    for x, y in train_loader:
        ...
"""),
    entry("output-classes-mismatch", "error", "The model has more outputs than the data has classes",
          "Extra outputs never see a positive example; they waste capacity and make the predicted class "
          "distribution wrong (and usually betray a copy-pasted head, e.g. 100 classes for 10-class data).",
          """
num_classes = int(y_train.max()) + 1        # or len(dataset.classes)
model.fc = nn.Linear(in_features, num_classes)
"""),
    entry("unregistered-submodules", "error", "Layers kept in a plain Python list or dict are not part of the model",
          "nn.Module only registers sub-modules assigned as attributes or held in nn.ModuleList/ModuleDict; "
          "layers in a list are missing from model.parameters(), so the optimizer never updates them, "
          "and .to(device), .eval() and state_dict() skip them.",
          """
self.blocks = nn.ModuleList([Block(d) for _ in range(n)])   # not [Block(d) for _ in range(n)]
self.heads = nn.ModuleDict({"a": nn.Linear(d, 2)})          # not {"a": nn.Linear(d, 2)}
"""),
    entry("dead-relu", "warning", "Most ReLU units are dead (output 0 for every input)",
          "A dead unit outputs 0 for all inputs and gets no gradient, so it never recovers; usually caused "
          "by a too high learning rate or a large negative bias.",
          """
nn.init.kaiming_normal_(layer.weight, nonlinearity="relu"); nn.init.zeros_(layer.bias)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)    # lower the learning rate
act = nn.LeakyReLU(0.01)                                      # or an activation without a dead zone
"""),
    entry("bn-small-batch", "warning", "BatchNorm trained with very small batches",
          "BatchNorm estimates mean and variance from the batch; with a few samples these estimates are "
          "noise, training is unstable and eval-mode results differ from training.",
          """
loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)   # larger batches
# or replace BatchNorm with a batch-size-independent norm:
nn.GroupNorm(num_groups=8, num_channels=c)      # conv nets;  nn.LayerNorm(d) for MLPs
"""),
    entry("symmetric-init", "error", "Hidden units start identical and stay identical (constant initialization)",
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
    entry("eval-without-no-grad", "info", "Evaluation forwards build an autograd graph that is never used",
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
]
