"""vanishing-gradients: Gradients vanish in the first layers."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='vanishing-gradients',
    severity='warning',
    title='Gradients vanish in the first layers',
    why=('The first layers get gradients thousands of times smaller (relative to their weights) than the last ones,'
         ' so they barely learn; typical of deep stacks of sigmoid/tanh.'),
    fix="""
nn.Sequential(nn.Linear(d, h), nn.ReLU(), ...)    # ReLU/GELU instead of Sigmoid/Tanh between layers
# add normalization (nn.BatchNorm1d / nn.LayerNorm) or residual connections; init with nn.init.kaiming_normal_
""",
    maybe_fine=(""),
    evidence=('first-layer vs last-layer (gradient norm / weight norm), at sampled steps'),
    applies_to=ALL_OBJECTIVES,
    harm=("The run is harmed: the first layers cannot learn, their gradients being under 1/1000 of the last layer's"
          ' relative to their weights, with an optimizer (SGD-like) that does not rescale them.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/optim.py',
)
