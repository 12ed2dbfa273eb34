"""loss-not-decreasing: The training loss does not decrease."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES, Detector

DETECTOR = Detector(
    id='loss-not-decreasing',
    severity='warning',
    title='The training loss does not decrease',
    why=('After many steps the loss is where it started: the model learns nothing. Common causes: inputs and labels'
         ' out of step (shuffled separately), a loss that does not fit the outputs, a wrong learning rate.'),
    fix="""
x, y = next(iter(train_loader)); print(x[:4], y[:4])   # do inputs and labels belong together?
perm = torch.randperm(len(x)); x, y = x[perm], y[perm]  # shuffle inputs and labels with ONE permutation
# then: `torchwise check --overfit python train.py` (can the model fit one batch?)
""",
    maybe_fine=(""),
    evidence=("last quarter vs first tenth of each optimizer's losses; stopped runs need a clear absence of "
              "progress at the loss's noise (slope, 2 s.e.); a whole run of fewer than 100 losses is only a hint "
              "(a slow start looks the same over so few steps)"),
    applies_to=FIXED_OBJECTIVES,
    harm=('The harm itself: a loss against fixed targets does not fall over the run (judged against its noise).'),
    explains=(),
    decided_in='checks/model.py',
)
