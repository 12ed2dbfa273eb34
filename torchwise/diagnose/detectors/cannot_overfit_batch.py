"""cannot-overfit-batch: The model cannot fit a single small batch."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES, Detector

DETECTOR = Detector(
    id='cannot-overfit-batch',
    severity='warning',
    title='The model cannot fit a single small batch',
    why=('A working model/loss pair drives the loss on one small batch close to zero in a few hundred steps; if it '
         'cannot, a long run will not help: look at the model, the loss and the labels first.'),
    fix="""
x, y = next(iter(train_loader))
for _ in range(300):                       # the sanity check torchwise ran
    optimizer.zero_grad(); loss = criterion(model(x), y); loss.backward(); optimizer.step()
print(loss.item())                         # should be close to 0
""",
    maybe_fine=(""),
    evidence=('a copy of the model trained on the first batch only (--overfit)'),
    applies_to=FIXED_OBJECTIVES,
    harm=('The run is harmed: a copy of the model cannot fit one batch of a fixed objective.'),
    explains=(),
    decided_in='script_check/sanity.py',
)
