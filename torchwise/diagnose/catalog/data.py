"""Catalog entries for mistakes in the data: labels, values, splits, augmentation and the order batches come in."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry, entry

ENTRIES: list[Entry] = [
    entry("labels-not-zero-based", "error", "Class labels start at 1, not 0",
          "CrossEntropyLoss expects labels 0..C-1. With labels 1..C the output for class 0 is never trained "
          "and every class index is shifted by one.",
          """
y = y - 1                          # or: encode labels once, e.g. {label: i for i, label in enumerate(sorted(set(labels)))}
model = Net(num_classes=num_classes)   # num_classes = number of distinct labels
"""),
    entry("nonfinite-input", "error", "The data contains NaN or infinite values",
          "A single NaN in a batch makes the loss NaN and, after one step, the weights.",
          """
x = torch.nan_to_num(x, nan=0.0)           # or impute missing values (e.g. with the train-split mean)
assert torch.isfinite(x).all(), "data contains NaN/inf"
"""),
    entry("unnormalized-input", "warning", "Inputs are not normalized",
          "Inputs with large values or wildly different feature scales make the first layer's gradients huge "
          "and training slow or unstable.",
          """
mean, std = x_train.mean(0), x_train.std(0) + 1e-8     # statistics of the TRAIN split only
x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
# images: transforms.ToTensor() (0..1) + transforms.Normalize(mean, std)
"""),
    entry("val-augmentation", "error", "Random augmentation is applied to validation data",
          "The same validation sample looks different on every pass, so validation metrics are noisy and "
          "too low; validation data must be deterministic.",
          """
train_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
val_tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), normalize])  # no random ops
val_set = MyDataset(val_files, transform=val_tf)
"""),
    entry("train-val-overlap", "error", "Validation samples also appear in the training data",
          "The model is scored on samples it trained on, so validation metrics are optimistic and "
          "over-fitting goes unnoticed.",
          """
perm = torch.randperm(len(x))
train_idx, val_idx = perm[:n_train], perm[n_train:]       # disjoint index sets
# or: train_set, val_set = torch.utils.data.random_split(dataset, [n_train, n_val])
"""),
    entry("no-shuffle", "warning", "Training batches are not shuffled (they are sorted by label)",
          "Batches that contain one class at a time make the model chase the current class; the loss "
          "oscillates and the final model favours the last classes seen.",
          """
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
# plain tensors: perm = torch.randperm(len(x)) each epoch and slice x[perm], y[perm]
"""),
    entry("sampler-epoch-not-set", "error", "DistributedSampler.set_epoch() is never called",
          "Without set_epoch(epoch) the sampler shuffles with the same seed every epoch, so every epoch "
          "sees the data in exactly the same order.",
          """
for epoch in range(epochs):
    sampler.set_epoch(epoch)       # before iterating the loader each epoch
    for x, y in loader:
        ...
"""),
    entry("label-imbalance", "warning", "Classes are heavily imbalanced and the loss is not weighted",
          "With a class that is 10x rarer than another, the model can reach a low loss by ignoring it.",
          """
counts = torch.bincount(y_train, minlength=num_classes).float()
criterion = nn.CrossEntropyLoss(weight=counts.sum() / (len(counts) * counts))
# the same: nn.CrossEntropyLoss(weight=torchwise.class_weights(y_train));  CLI: --set train.class_weights=balanced
# or sample balanced batches: WeightedRandomSampler(weights=1.0 / counts[y_train], num_samples=len(y_train))
"""),
]
