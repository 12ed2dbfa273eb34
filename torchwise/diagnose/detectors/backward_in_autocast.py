"""backward-in-autocast: backward() or optimizer.step() runs inside the autocast block."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='backward-in-autocast',
    severity='info',
    title='backward() or optimizer.step() runs inside the autocast block',
    why=('autocast is meant to wrap the forward pass and the loss computation only: the PyTorch AMP documentation '
         'advises against running backward under it. In eager mode it buys nothing (each backward op already runs '
         "in the dtype autocast chose for its forward op), and it can cost: torch.compile'd regions trace their "
         "backward under the forward's autocast, which has overflowed in fp16 where the eager backward did not "
         "(pytorch issue 153044), and whatever autocast-eligible work the update path does (a custom optimizer's or"
         " a clipping helper's matmuls, metrics computed with matmuls) runs in reduced precision."),
    fix="""
with torch.autocast("cuda", dtype=torch.bfloat16):   # the forward pass and the loss only
    loss = criterion(model(x), y)
loss.backward()                                     # after the block: backward ...
optimizer.step()                                    # ... and the update in full precision
# fp16 with a GradScaler, the same way: scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
""",
    maybe_fine=('PyTorch runs backward ops in the dtype autocast chose for their forward ops whether or not '
                'backward() sits inside the block, so the gradients are the same; the pattern is discouraged by the'
                ' AMP documentation, not wrong.'),
    evidence=("torch.is_autocast_enabled(device type) is True, for the loss's device, when backward() starts, or "
              "for the parameters' device when optimizer.step() starts"),
    applies_to=ALL_OBJECTIVES,
    harm=(""),
    explains=(),
    decided_in='checks/optim.py',
)
