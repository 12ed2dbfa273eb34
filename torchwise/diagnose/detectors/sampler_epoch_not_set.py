"""sampler-epoch-not-set: DistributedSampler.set_epoch() is never called."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='sampler-epoch-not-set',
    severity='error',
    title='DistributedSampler.set_epoch() is never called',
    why=('Without set_epoch(epoch) the sampler shuffles with the same seed every epoch, so every epoch sees the '
         'data in exactly the same order.'),
    fix="""
for epoch in range(epochs):
    sampler.set_epoch(epoch)       # before iterating the loader each epoch
    for x, y in loader:
        ...
""",
    maybe_fine=(""),
    evidence=('DistributedSampler.epoch unchanged between iterations of its loader'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: every epoch sees the data in the same order.'),
    explains=(),
    decided_in='checks/data.py',
)
