"""labels-not-zero-based: Class labels start at 1, not 0."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import LABELLED_TARGETS, Detector

DETECTOR = Detector(
    id='labels-not-zero-based',
    severity='error',
    title='Class labels start at 1, not 0',
    why=('CrossEntropyLoss expects labels 0..C-1. With labels 1..C the output for class 0 is never trained and '
         'every class index is shifted by one.'),
    fix="""
y = y - 1                          # or: encode labels once, e.g. {label: i for i, label in enumerate(sorted(set(labels)))}
model = Net(num_classes=num_classes)   # num_classes = number of distinct labels
""",
    maybe_fine=(""),
    evidence=('the class-index targets of cross_entropy never contain 0; the others are contiguous; not for token '
              "targets (sequences of ids encoded over the output's vocabulary, or a decoder fed one position at a "
              'time)'),
    applies_to=LABELLED_TARGETS,
    harm=('Wrong whatever happens for class targets taken from the data: output 0 is trained to never occur and '
          'every class is shifted by one against its output.'),
    explains=('lr-too-low', 'loss-not-decreasing'),
    decided_in='checks/losses.py',
)
