"""exploding-gradients: Gradients explode."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='exploding-gradients',
    severity='warning',
    title='Gradients explode',
    why=('Gradients far larger than the weights make updates that throw the weights away; typical of deep or '
         'recurrent networks with a bad initialization or no normalization.'),
    fix="""
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
optimizer.step()
# and use a sane init (nn.init.kaiming_normal_ for ReLU nets) / normalization layers / a lower lr
""",
    maybe_fine=(""),
    evidence=('gradient norm / weight norm per tensor, per unit of loss, with a symptom (non-finite values, a '
              'rising loss, an update larger than the weights)'),
    applies_to=ALL_OBJECTIVES,
    harm=('The run is harmed: gradients far above the weights come with non-finite values, an update larger than '
          'the weights, or (for a loss against fixed targets) a rising loss.'),
    explains=('dead-relu', 'nonfinite-loss', 'loss-not-decreasing'),
    decided_in='checks/optim.py',
)
