"""params-not-in-optimizer: Some trainable parameters are not in the optimizer."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='params-not-in-optimizer',
    severity='error',
    title='Some trainable parameters are not in the optimizer',
    why=('They receive gradients but are never updated, usually because a layer was replaced or added after the '
         'optimizer was created.'),
    fix="""
model.fc = nn.Linear(512, num_classes)          # change the model first ...
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # ... then build the optimizer
# to freeze a part on purpose: p.requires_grad_(False) for its parameters
""",
    maybe_fine=(""),
    evidence=('parameters of a called model that have .grad at step() but are in no optimizer'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: parameters receive gradients at step() but no optimizer updates them.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/model.py',
)
