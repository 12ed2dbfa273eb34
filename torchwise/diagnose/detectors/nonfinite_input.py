"""nonfinite-input: The data contains NaN or infinite values."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='nonfinite-input',
    severity='error',
    title='The data contains NaN or infinite values',
    why=('A single NaN in a batch makes the loss NaN and, after one step, the weights.'),
    fix="""
x = torch.nan_to_num(x, nan=0.0)           # or impute missing values (e.g. with the train-split mean)
assert torch.isfinite(x).all(), "data contains NaN/inf"
""",
    maybe_fine=(""),
    evidence=('isfinite on model inputs and loss targets'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: NaN/inf in the inputs or targets make the loss and the weights non-finite.'),
    explains=('lr-too-high', 'lr-too-low', 'exploding-gradients', 'vanishing-gradients', 'dead-relu', 'nonfinite-loss', 'loss-not-decreasing'),
    decided_in='checks/model.py',
)
