"""output-classes-mismatch: The model has more outputs than the data has classes."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import LABELLED_TARGETS, Detector

DETECTOR = Detector(
    id='output-classes-mismatch',
    severity='error',
    title='The model has more outputs than the data has classes',
    why=('Extra outputs never see a positive example; they waste capacity and make the predicted class distribution'
         ' wrong (and usually betray a copy-pasted head, e.g. 100 classes for 10-class data).'),
    fix="""
num_classes = int(y_train.max()) + 1        # or len(dataset.classes)
model.fc = nn.Linear(in_features, num_classes)
""",
    maybe_fine=(""),
    evidence=('labels 0..k-1 seen with C > k outputs, and the chance that the C-k others are classes (each at least'
              ' a tenth as common as the rarest seen) none of which appeared among the labels is below 1e-6; not '
              'for next-token (language-model) targets, nor for a target that is class 0 in every row (a '
              'contrastive loss)'),
    applies_to=LABELLED_TARGETS,
    harm=('Wrong whatever happens: the model has outputs for classes that (at the odds computed) never occur among '
          "the data's targets, a head sized for another data set, so its probabilities and accuracy are spread over"
          ' classes that do not exist. At most 2 unused outputs (and a quarter of them) are an info hint: reserved '
          'symbols (a blank, padding, a delimiter) are outputs of that kind.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/head_size.py',
)
