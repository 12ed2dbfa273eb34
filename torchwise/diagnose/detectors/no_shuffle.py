"""no-shuffle: Training batches are not shuffled (they are sorted by label)."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import LABELLED_TARGETS, Detector

DETECTOR = Detector(
    id='no-shuffle',
    severity='warning',
    title='Training batches are not shuffled (they are sorted by label)',
    why=('Batches that contain one class at a time make the model chase the current class; the loss oscillates and '
         'the final model favours the last classes seen.'),
    fix="""
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
# plain tensors: perm = torch.randperm(len(x)) each epoch and slice x[perm], y[perm]
""",
    maybe_fine=(""),
    evidence=('the share of training batches that contain a single class'),
    applies_to=LABELLED_TARGETS,
    harm=('The run is harmed: most training batches hold a single class, far more of them than shuffled batches '
          'of the same class shares would (rare classes in small batches give single-class batches by chance), so '
          'each step pulls the model towards one class.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/data.py',
)
