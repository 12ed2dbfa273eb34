"""clip-scaled-gradients: Gradients are clipped while still multiplied by the AMP loss scale."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='clip-scaled-gradients',
    severity='error',
    title='Gradients are clipped while still multiplied by the AMP loss scale',
    why=('GradScaler multiplies the loss (and so every gradient) by a scale of about 65536; clipping before '
         'scaler.unscale_(optimizer) compares that inflated norm with your max_norm, so every step is clipped to a '
         'tiny fraction of its real size.'),
    fix="""
scaler.scale(loss).backward()
scaler.unscale_(optimizer)                                   # true gradients first
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
""",
    maybe_fine=(""),
    evidence=('clip_grad_norm_/clip_grad_value_ on gradients of a GradScaler-scaled backward before '
              'scaler.unscale_() of their optimizer'),
    applies_to=ALL_OBJECTIVES,
    harm=("Wrong whatever happens: gradients multiplied by the GradScaler's scale are clipped, so the threshold "
          'means nothing and every update is clipped.'),
    explains=('lr-too-low', 'vanishing-gradients', 'loss-not-decreasing'),
    decided_in='checks/calls.py',
)
