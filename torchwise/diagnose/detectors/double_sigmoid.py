"""double-sigmoid: Sigmoid applied before BCEWithLogitsLoss."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='double-sigmoid',
    severity='error',
    title='Sigmoid applied before BCEWithLogitsLoss',
    why=('BCEWithLogitsLoss applies the sigmoid itself; a second sigmoid squeezes its input into (0, 1), so '
         'predictions can never be confident and the gradients are tiny.'),
    fix="""
logits = model(x)                  # no sigmoid at the end of the model
loss = F.binary_cross_entropy_with_logits(logits, y)
probs = torch.sigmoid(logits)      # only for prediction
""",
    maybe_fine=(""),
    evidence=('the autograd node that made the input of binary_cross_entropy_with_logits (seen through views, '
              'indexing and casts) is a sigmoid; for binary_cross_entropy, a sigmoid of a sigmoid'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the loss squashes an already squashed value, so predictions can never be '
          'confident and the gradients are tiny.'),
    explains=('lr-too-low', 'vanishing-gradients', 'loss-not-decreasing'),
    decided_in='checks/losses.py',
)
