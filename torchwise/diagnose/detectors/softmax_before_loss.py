"""softmax-before-loss: Probabilities (softmax output) are fed to a loss that expects logits."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='softmax-before-loss',
    severity='error',
    title='Probabilities (softmax output) are fed to a loss that expects logits',
    why=('CrossEntropyLoss applies log_softmax itself; feeding it softmax outputs squashes the gradients and '
         'training stalls at a mediocre accuracy.'),
    fix="""
logits = model(x)                  # no softmax in the model's forward
loss = F.cross_entropy(logits, y)  # or nn.CrossEntropyLoss()(logits, y)
probs = logits.softmax(dim=1)      # only where you need probabilities (prediction)
""",
    maybe_fine=(""),
    evidence=('the cross_entropy/nll_loss input is in [0, 1] and sums to 1 over the class dim (or over another '
              'dim), or is exactly 1 (0) everywhere: a softmax (log_softmax) over a dim of size 1'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the loss treats probabilities as logits (or log-probabilities), its gradients '
          'are squashed and its value is not the cross entropy.'),
    explains=('lr-too-low', 'vanishing-gradients', 'loss-not-decreasing'),
    decided_in='checks/losses.py',
)
