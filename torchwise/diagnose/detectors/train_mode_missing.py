"""train-mode-missing: Training runs with the model in eval mode."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='train-mode-missing',
    severity='error',
    title='Training runs with the model in eval mode',
    why=('After model.eval() (usually in a validation function) Dropout stays off and BatchNorm stops learning its '
         'statistics until model.train() is called again.'),
    fix="""
for epoch in range(epochs):
    model.train()                  # at the start of every epoch, after any validation
    for x, y in train_loader:
        ...
""",
    maybe_fine=(""),
    evidence=('forward passes with gradients in eval mode, followed by optimizer.step()'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: optimizer steps are taken with Dropout off and BatchNorm frozen, so the model '
          'trained is not the one the code describes.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/model.py',
)
