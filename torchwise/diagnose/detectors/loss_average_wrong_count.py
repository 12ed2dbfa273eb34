"""loss-average-wrong-count: The epoch's average loss is divided by the wrong count."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='loss-average-wrong-count',
    severity='warning',
    title="The epoch's average loss is divided by the wrong count",
    why=('The loss the script reports for an epoch is its sum divided by a count that does not match the sum: '
         'len(loader.dataset) while a sampler (SubsetRandomSampler, DistributedSampler) drew fewer samples, the '
         'number of samples for a sum of per-batch means, or the number of batches for a sum of loss x batch size. '
         'Training is unaffected, but the reported number is off by a constant factor, so it cannot be compared '
         'with a validation loss or another run, and early stopping or model selection on it misleads.'),
    fix="""
total, seen = 0.0, 0
for x, y in loader:
    loss = criterion(model(x), y)        # a mean over the batch
    ...
    total += loss.item() * x.size(0)     # back to a sum over the batch's samples
    seen += x.size(0)                    # the samples this epoch really drew (not len(loader.dataset))
print("epoch loss", total / seen)
# or: a sum of per-batch means divided by the number of batches, total / len(loader)
""",
    maybe_fine=(""),
    evidence=('after each training pass over a loader, the numbers the script printed (4+ significant digits) '
              "against the averages its backward() losses and batch sizes give: equal to a wrong count's "
              "(len(dataset) vs the sampler's draw, samples vs batches), equal to no right one's, 10%+ apart, in 2 "
              'epochs (or 1 with 6+ digits)'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the number the script prints as its epoch loss is divided by the wrong count '
          '(measured against the losses backward() saw).'),
    explains=(),
    decided_in='checks/loss_average.py',
)
