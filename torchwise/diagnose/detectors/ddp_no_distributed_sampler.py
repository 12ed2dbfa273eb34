"""ddp-no-distributed-sampler: Distributed training without a DistributedSampler."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='ddp-no-distributed-sampler',
    severity='error',
    title='Distributed training without a DistributedSampler',
    why=('Every process iterates the whole data set in the same order, so the N GPUs compute the same batches: N '
         'times the cost for the speed of one, and each epoch is really N epochs.'),
    fix="""
sampler = DistributedSampler(train_ds, shuffle=True)        # each rank gets its own 1/N share
loader = DataLoader(train_ds, batch_size=64, sampler=sampler)   # no shuffle=True with a sampler
for epoch in range(epochs):
    sampler.set_epoch(epoch)
""",
    maybe_fine=(""),
    evidence=('a training loader without a DistributedSampler iterated while a process group of 2+ ranks is up'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: every rank trains on the same batches.'),
    explains=(),
    decided_in='checks/calls.py',
)
