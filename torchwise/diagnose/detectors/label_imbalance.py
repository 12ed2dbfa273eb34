"""label-imbalance: Classes are heavily imbalanced and the loss is not weighted."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import LABELLED_TARGETS, Detector

DETECTOR = Detector(
    id='label-imbalance',
    severity='warning',
    title='Classes are heavily imbalanced and the loss is not weighted',
    why=('With a class that is 10x rarer than another, the model can reach a low loss by ignoring it.'),
    fix="""
counts = torch.bincount(y_train, minlength=num_classes).float()
criterion = nn.CrossEntropyLoss(weight=counts.sum() / (len(counts) * counts))
# the same: nn.CrossEntropyLoss(weight=torchwise.class_weights(y_train));  CLI: --set train.class_weights=balanced
# or sample balanced batches: WeightedRandomSampler(weights=1.0 / counts[y_train], num_samples=len(y_train))
""",
    maybe_fine=('Imbalanced classes are common and the model still predicts the rare class here; class weights or a'
                ' sampler matter when it stops doing so.'),
    evidence=('class counts of the loss targets with no class weights: a warning when the model predicted the rare '
              'class for none of its samples in the last 10 checked batches, else an info hint; not for next-token '
              '(language-model) targets'),
    applies_to=LABELLED_TARGETS,
    harm=('The run is harmed only when the model predicted the rare class for none of its samples in the last '
          'checked batches (then a warning); otherwise an info hint.'),
    explains=(),
    decided_in='checks/losses.py',
)
