"""lr-too-low: Learning rate too low: the weights barely move."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES, Detector

DETECTOR = Detector(
    id='lr-too-low',
    severity='warning',
    title='Learning rate too low: the weights barely move',
    why=('Each step changes the weights by less than a millionth of their size; the loss stays flat and training '
         'wastes its time.'),
    fix="""
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
""",
    maybe_fine=(""),
    evidence=("update / weight norm below 1e-4 per step, healthy (>= 1e-3) at a usual lr for the optimizer's kind, "
              'and a flat loss'),
    applies_to=FIXED_OBJECTIVES,
    harm=('The run is harmed: the loss stays flat while each update moves the weights by less than 1e-4 of their '
          'size.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/optim.py',
)
