"""unnormalized-input: Inputs are not normalized."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

# what raw input scales do to a run when they do harm
HARMS = {"loss-not-decreasing", "lr-too-low", "lr-too-high", "exploding-gradients", "nonfinite-loss", "dead-relu"}


def harm_seen(finding, found: set, w) -> bool:
    return bool(found & HARMS)

DETECTOR = Detector(
    id='unnormalized-input',
    severity='warning',
    title='Inputs are not normalized',
    why=("Inputs with large values or wildly different feature scales make the first layer's gradients huge and "
         'training slow or unstable.'),
    fix="""
mean, std = x_train.mean(0), x_train.std(0) + 1e-8     # statistics of the TRAIN split only
x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
# images: transforms.ToTensor() (0..1) + transforms.Normalize(mean, std)
""",
    maybe_fine=('A normalisation layer after the input, or an adaptive optimizer, copes with raw scales: this run '
                'shows no stalled loss, no exploding gradient and no dead layer.'),
    evidence=('mean / standard deviation / per-feature scale of model inputs in training'),
    applies_to=ALL_OBJECTIVES,
    harm=('Reported as a warning only when this run is harmed (the loss of a fixed objective stalls, gradients '
          'explode, a ReLU layer dies or values become non-finite); otherwise an info hint.'),
    explains=('lr-too-high', 'exploding-gradients', 'dead-relu', 'loss-not-decreasing'),
    decided_in='checks/data.py',
    harm_seen=harm_seen,
)
