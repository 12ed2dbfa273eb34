"""symmetric-init: Hidden units start identical and stay identical (constant initialization)."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='symmetric-init',
    severity='error',
    title='Hidden units start identical and stay identical (constant initialization)',
    why=('When every unit of a layer starts with the same weights, every unit computes the same output and gets the'
         ' same gradient, so they never become different: a layer of 128 units learns like a layer of one. Random '
         'initialization is what breaks this symmetry.'),
    fix="""
# keep PyTorch's default (random) initialization, or use a random scheme:
for m in model.modules():
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")   # not zeros_/constant_
        nn.init.zeros_(m.bias)                                     # constant biases are fine
# a zero-initialized *last* layer is fine when the layers before it are random
""",
    maybe_fine=(""),
    evidence=("a hidden Linear/Conv layer (not the model's last) whose weight rows and biases are all equal at the "
              'first checked step and still equal 3+ optimizer steps later'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: units that start equal get equal gradients and stay equal, so the layer has the '
          'capacity of one unit.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/symmetry.py',
)
