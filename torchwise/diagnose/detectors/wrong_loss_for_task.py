"""wrong-loss-for-task: The loss function does not fit the task."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import LABELLED_TARGETS, Detector

DETECTOR = Detector(
    id='wrong-loss-for-task',
    severity='error',
    title='The loss function does not fit the task',
    why=('Regression losses on class labels treat classes as ordered numbers; cross entropy on a single output or '
         'on continuous targets cannot learn anything.'),
    fix="""
# classification (integer labels 0..C-1):  model outputs C logits
loss = F.cross_entropy(logits, y)
# binary / multi-label (0/1 targets):        one logit per label
loss = F.binary_cross_entropy_with_logits(logits, y.float())
# regression (real-valued targets):
loss = F.mse_loss(pred.squeeze(-1), y)
""",
    maybe_fine=(""),
    evidence=("the loss's inputs/targets: MSE/L1 on integer class labels, BCE on class ids, cross_entropy on one "
              'output or real targets, nll_loss on positive values, MSE shapes that broadcast'),
    applies_to=LABELLED_TARGETS,
    harm=("Wrong whatever happens: the loss's inputs and targets do not fit it (class ids as real numbers, shapes "
          'that broadcast), so it optimises something else than the task.'),
    explains=('lr-too-low', 'loss-not-decreasing'),
    decided_in='checks/losses.py',
)
