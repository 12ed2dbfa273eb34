"""eval-mode-missing: Validation runs with the model in training mode."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='eval-mode-missing',
    severity='error',
    title='Validation runs with the model in training mode',
    why=('In training mode Dropout drops units at random and BatchNorm uses (and updates) the statistics of the '
         'current batch, so validation numbers are noisy and too pessimistic.'),
    fix="""
model.eval()                       # Dropout off, BatchNorm uses running statistics
with torch.no_grad():
    for x, y in val_loader:
        ...
model.train()                      # back to training mode before the next epoch
""",
    maybe_fine=(""),
    evidence=('a forward under no_grad, or over a loader that runs no optimizer step, with model.training True in a'
              ' model that has Dropout/BatchNorm'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the evaluated numbers come from a model with Dropout dropping units and '
          'BatchNorm using (and updating) batch statistics, not from the model that will be used.'),
    explains=(),
    decided_in='checks/model.py',
)
