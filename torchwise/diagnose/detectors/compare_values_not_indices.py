"""compare-values-not-indices: Accuracy compares the max values, not the predicted classes."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='compare-values-not-indices',
    severity='error',
    title='Accuracy compares the max values, not the predicted classes',
    why=('torch.max(out, dim) and out.topk(k, dim) return (values, indices); the values are scores such as 3.27, '
         'which almost never equal an integer label, so the accuracy reads near 0 (or noise) whatever the model '
         'learned.'),
    fix="""
_, pred = torch.max(out, 1)        # the second result holds the class indices
pred = out.argmax(dim=1)           # or simply this
correct += (pred == y).sum().item()
""",
    maybe_fine=(""),
    evidence=('eq/ne between the values of max/topk over a dim of a model output and an integer tensor'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: accuracy compares the largest scores with class ids, so the metric is '
          'meaningless.'),
    explains=(),
    decided_in='checks/followed.py',
)
