"""nonfinite-loss: The loss became NaN or infinite."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='nonfinite-loss',
    severity='error',
    title='The loss became NaN or infinite',
    why=('Once a NaN reaches the weights every later step is garbage; it comes from an operation that overflows or '
         'is undefined (log of 0, division by 0, sqrt of a negative) or from a too high learning rate.'),
    fix="""
out = torch.log(x.clamp_min(1e-8))         # guard log/div/sqrt inputs
out = x / (x.sum(dim=1, keepdim=True) + 1e-8)
torch.autograd.set_detect_anomaly(True)    # while debugging: names the operation that produced the NaN
""",
    maybe_fine=(""),
    evidence=('isfinite on the loss; then on every module output and operation to name where NaN/inf starts'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: a NaN/inf loss poisons every weight it reaches.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/model.py',
)
