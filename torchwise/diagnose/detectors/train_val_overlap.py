"""train-val-overlap: Validation samples also appear in the training data."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import DATA_SET_OBJECTIVES, Detector

DETECTOR = Detector(
    id='train-val-overlap',
    severity='error',
    title='Validation samples also appear in the training data',
    why=('The model is scored on samples it trained on, so validation metrics are optimistic and over-fitting goes '
         'unnoticed.'),
    fix="""
perm = torch.randperm(len(x))
train_idx, val_idx = perm[:n_train], perm[n_train:]       # disjoint index sets
# or: train_set, val_set = torch.utils.data.random_split(dataset, [n_train, n_val])
""",
    maybe_fine=(""),
    evidence=('hashes of evaluated samples found among the hashes of trained samples; for one input shared by index'
              ' masks (loss on out[idx_train], evaluation on out[idx_val]), the evaluated output rows vs the rows'
              ' the training loss uses; never an evaluation over the training loader itself (a training accuracy '
              'asked for by name)'),
    applies_to=DATA_SET_OBJECTIVES,
    harm=('Wrong whatever happens: the validation metric counts samples the model was trained on, so it overstates '
          'how the model does on new data. Under 10% identical rows is an info hint: a correct split of data with '
          'duplicate records gives that, and new data repeats them too.'),
    explains=(),
    decided_in='checks/overlap.py',
)
