"""clip-has-no-effect: Gradient clipping runs where it cannot change the update."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='clip-has-no-effect',
    severity='error',
    title='Gradient clipping runs where it cannot change the update',
    why=('clip_grad_norm_ only changes the gradients that the next optimizer.step() uses: called after step() (or '
         'after zero_grad()) it clips gradients that are already used or gone.'),
    fix="""
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)   # after backward ...
optimizer.step()                                                   # ... before step
""",
    maybe_fine=(""),
    evidence=('clip_grad_norm_/clip_grad_value_ after optimizer.step() (before the next backward), or on parameters'
              ' whose .grad is None'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: clipping runs after step() or on gradients that are None, so no update is '
          'clipped.'),
    explains=(),
    decided_in='checks/calls.py',
)
