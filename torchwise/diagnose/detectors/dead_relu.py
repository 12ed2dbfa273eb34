"""dead-relu: Most ReLU units are dead (output 0 for every input)."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

# what shows that dead units hold this run back: a fixed objective's loss that does not fall
STALLED = {"loss-not-decreasing", "lr-too-low"}


def harm_seen(finding, found: set, w) -> bool:
    """A whole layer dead (nothing passes it) is harm by itself; a share of it is harm only with a stalled loss."""
    return finding.evidence.get("dead_fraction", 0.0) >= 0.999 or bool(found & STALLED)

DETECTOR = Detector(
    id='dead-relu',
    severity='warning',
    title='Most ReLU units are dead (output 0 for every input)',
    why=('A dead unit outputs 0 for all inputs and gets no gradient, so it never recovers; usually caused by a too '
         'high learning rate or a large negative bias.'),
    fix="""
nn.init.kaiming_normal_(layer.weight, nonlinearity="relu"); nn.init.zeros_(layer.bias)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)    # lower the learning rate
act = nn.LeakyReLU(0.01)                                      # or an activation without a dead zone
""",
    maybe_fine=('Many dead units in a wide layer cost capacity the model may not need: this run shows no stalled '
                'loss and the layer still passes signal, so it is not holding training back.'),
    evidence=('share of ReLU units whose output is 0 for every sample of consecutive sampled batches (8+ samples '
              'pooled)'),
    applies_to=ALL_OBJECTIVES,
    harm=('Reported as a warning only when this run is harmed: the loss of a fixed objective stalls, or every unit '
          'of the layer is dead (nothing passes it); otherwise an info hint.'),
    explains=('no-gradient-flow', 'lr-too-low', 'loss-not-decreasing'),
    decided_in='checks/model.py',
    harm_seen=harm_seen,
)
