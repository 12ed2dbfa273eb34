"""accumulation-unscaled: Gradient accumulation sums unscaled losses."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES, Detector

DETECTOR = Detector(
    id='accumulation-unscaled',
    severity='warning',
    title='Gradient accumulation sums unscaled losses',
    why=('backward() adds gradients up: with k batches accumulated per optimizer step and each loss not divided by '
         'k, every step uses k times the mean gradient, which is the same as a k times larger learning rate (and '
         'makes the LR depend on the accumulation setting).'),
    fix="""
accum = 4
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum      # each batch counts 1/accum of the step
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
    maybe_fine=('Adam-like optimizers divide each gradient by its own running size, so a loss k times larger gives '
                'almost the same update; dividing by k matters for SGD-like optimizers.'),
    evidence=('k > 1 backward() calls between two steps of one optimizer, each on a new batch (new loader batch, or'
              " new input values for its models) and on the loss function's output itself"),
    applies_to=FIXED_OBJECTIVES,
    harm=('The run is harmed only with an optimizer that does not rescale gradients (SGD-like): the summed '
          'gradients make every update k times the intended one (then a warning); with Adam-like optimizers an info'
          ' hint.'),
    explains=(),
    decided_in='checks/accumulation.py',
)
