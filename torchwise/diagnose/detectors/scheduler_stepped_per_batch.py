"""scheduler-stepped-per-batch: An epoch-based LR scheduler is stepped after every batch."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='scheduler-stepped-per-batch',
    severity='error',
    title='An epoch-based LR scheduler is stepped after every batch',
    why=('StepLR, MultiStepLR, ExponentialLR and CosineAnnealingLR count epochs: step_size, milestones and T_max '
         'are in epochs. Stepped per batch, the schedule runs hundreds of times too fast: the learning rate '
         'collapses (or the cosine cycles) within the first epoch and training stalls.'),
    fix="""
for epoch in range(epochs):
    for x, y in train_loader:
        ...
        optimizer.step()
    scheduler.step()               # once per epoch, after the epoch's optimizer steps
# per-batch schedules are OneCycleLR / LinearLR with total_steps = epochs * len(train_loader)
""",
    maybe_fine=(""),
    evidence=('StepLR/MultiStepLR/ExponentialLR/CosineAnnealingLR stepped several times per training pass, with a '
              'schedule shorter than one epoch or an LR spent (< 1/100) within the first half of the run'),
    applies_to=ALL_OBJECTIVES,
    harm=('The run is harmed: the learning rate is spent (under 1/100) within the first half of the run, or the '
          'schedule is shorter than one epoch.'),
    explains=('lr-too-low', 'loss-not-decreasing'),
    decided_in='checks/calls.py',
)
