"""val-augmentation: Random augmentation is applied to validation data."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='val-augmentation',
    severity='error',
    title='Random augmentation is applied to validation data',
    why=('The same validation sample looks different on every pass, so validation metrics are noisy and too low; '
         'validation data must be deterministic.'),
    fix="""
train_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
val_tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), normalize])  # no random ops
val_set = MyDataset(val_files, transform=val_tf)
""",
    maybe_fine=(""),
    evidence=('the same validation item read twice (random state restored) differs, in a loader whose samples are '
              'not trained on (its own dataset, or held-out sampler indices of the training one)'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the validation numbers are measured on randomly changed inputs, so they change '
          'from run to run and understate the model.'),
    explains=(),
    decided_in='checks/data.py',
)
