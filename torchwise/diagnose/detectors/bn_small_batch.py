"""bn-small-batch: BatchNorm trained with very small batches."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector


def harm_seen(finding, found: set, w) -> bool:
    """Two values per channel normalise to +-1 (one to 0): the layer's output carries no information then.
    Otherwise noisy statistics harm only where the loss of a fixed objective stalls."""
    return finding.evidence.get("values_per_channel", 64) <= 2 or "loss-not-decreasing" in found

DETECTOR = Detector(
    id='bn-small-batch',
    severity='warning',
    title='BatchNorm trained with very small batches',
    why=('BatchNorm estimates mean and variance from the batch; with a few samples these estimates are noise, '
         'training is unstable and eval-mode results differ from training.'),
    fix="""
loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)   # larger batches
# or replace BatchNorm with a batch-size-independent norm:
nn.GroupNorm(num_groups=8, num_channels=c)      # conv nets;  nn.LayerNorm(d) for MLPs
""",
    maybe_fine=('BatchNorm over a few samples still sees many values per channel when the feature maps are large '
                '(segmentation at batch 1-2 is the usual design): the statistics are noisy, not meaningless, and '
                'this run shows no stalled loss.'),
    evidence=('per BatchNorm layer in training: the batch size and the values per channel (batch x positions); '
              'fewer than 8 samples and fewer than 64 values per channel'),
    applies_to=ALL_OBJECTIVES,
    harm=('Reported as a warning only where the statistics carry no information (2 or fewer values per channel: the'
          ' normalised output is +-1 or 0) or the loss of a fixed objective stalls; otherwise an info hint.'),
    explains=(),
    decided_in='checks/data.py',
    harm_seen=harm_seen,
)
