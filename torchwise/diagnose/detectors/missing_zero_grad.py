"""missing-zero-grad: Gradients are never cleared between optimizer steps."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='missing-zero-grad',
    severity='error',
    title='Gradients are never cleared between optimizer steps',
    why=('backward() adds to .grad; without zero_grad() every step uses the sum of all past gradients, so updates '
         'grow and point the wrong way.'),
    fix="""
for x, y in loader:
    optimizer.zero_grad()          # clear the previous step's gradients
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    maybe_fine=(""),
    evidence=('a tensor hook sees a new gradient arrive while .grad still holds the one step() already used, and '
              "the next step() of that optimizer uses it, at 80%+ of one optimizer's checked steps"),
    applies_to=ALL_OBJECTIVES,
    harm=("Wrong whatever happens: step() applies this backward()'s gradients plus every earlier one's, so the "
          'update is not the one the loss asks for.'),
    explains=('lr-too-high', 'exploding-gradients', 'dead-relu', 'nonfinite-loss', 'loss-not-decreasing'),
    decided_in='checks/optim.py',
)
