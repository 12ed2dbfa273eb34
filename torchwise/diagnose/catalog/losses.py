"""Catalog entries for mistakes in the loss and in what is computed from the outputs (accuracy, the epoch's average loss)."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry, entry

ENTRIES: list[Entry] = [
    entry("softmax-before-loss", "error", "Probabilities (softmax output) are fed to a loss that expects logits",
          "CrossEntropyLoss applies log_softmax itself; feeding it softmax outputs squashes the gradients "
          "and training stalls at a mediocre accuracy.",
          """
logits = model(x)                  # no softmax in the model's forward
loss = F.cross_entropy(logits, y)  # or nn.CrossEntropyLoss()(logits, y)
probs = logits.softmax(dim=1)      # only where you need probabilities (prediction)
"""),
    entry("log-softmax-into-cross-entropy", "info", "cross_entropy is given log-probabilities (a log_softmax output)",
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
    entry("double-sigmoid", "error", "Sigmoid applied before BCEWithLogitsLoss",
          "BCEWithLogitsLoss applies the sigmoid itself; a second sigmoid squeezes its input into (0, 1), "
          "so predictions can never be confident and the gradients are tiny.",
          """
logits = model(x)                  # no sigmoid at the end of the model
loss = F.binary_cross_entropy_with_logits(logits, y)
probs = torch.sigmoid(logits)      # only for prediction
"""),
    entry("wrong-loss-for-task", "error", "The loss function does not fit the task",
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
    entry("loss-retains-graph", "error", "Loss tensors are kept with their whole computation graph",
          "Storing `loss` (not `loss.item()`) in a list or a running sum keeps every step's graph and "
          "activations alive: memory grows each step until it runs out.",
          """
running_loss += loss.item()        # a Python float, not the tensor
losses.append(loss.item())         # or loss.detach()
"""),
    entry("compare-values-not-indices", "error", "Accuracy compares the max values, not the predicted classes",
          "torch.max(out, dim) and out.topk(k, dim) return (values, indices); the values are scores such as "
          "3.27, which almost never equal an integer label, so the accuracy reads near 0 (or noise) whatever "
          "the model learned.",
          """
_, pred = torch.max(out, 1)        # the second result holds the class indices
pred = out.argmax(dim=1)           # or simply this
correct += (pred == y).sum().item()
"""),
    entry("loss-average-wrong-count", "warning", "The epoch's average loss is divided by the wrong count",
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
]
