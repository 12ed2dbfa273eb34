"""lr-too-high: Learning rate too high: the loss diverges."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES, Detector

DETECTOR = Detector(
    id='lr-too-high',
    severity='warning',
    title='Learning rate too high: the loss diverges',
    why=('Each step moves the weights by a large fraction of their size, so the loss jumps around or explodes '
         'instead of going down.'),
    fix="""
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # 3e-4..3e-3 for Adam(W); 1e-2..1e-1 for SGD
# find a good value: `torchwise lr-find`, then use ~1/10 of the loss minimum
""",
    maybe_fine=(""),
    evidence=('weight update / weight norm per step, together with a loss that rises above its first value'),
    applies_to=FIXED_OBJECTIVES,
    harm=('The run is harmed: the loss rises above its first value while each update is large against the weights.'),
    explains=('exploding-gradients', 'dead-relu', 'nonfinite-loss', 'loss-not-decreasing'),
    decided_in='checks/optim.py',
)
