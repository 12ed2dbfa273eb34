"""unregistered-submodules: Layers kept in a plain list or dict, or built inside forward(), are not part of the model."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='unregistered-submodules',
    severity='error',
    title='Layers kept in a plain list or dict, or built inside forward(), are not part of the model',
    why=('nn.Module only registers sub-modules assigned as attributes or held in nn.ModuleList/ModuleDict; layers '
         'in a list are missing from model.parameters(), so the optimizer never updates them, and .to(device), '
         '.eval() and state_dict() skip them.'),
    fix="""
self.blocks = nn.ModuleList([Block(d) for _ in range(n)])   # not [Block(d) for _ in range(n)]
self.heads = nn.ModuleDict({"a": nn.Linear(d, 2)})          # not {"a": nn.Linear(d, 2)}
self.proj = nn.Linear(d, d)   # in __init__, once: not nn.Linear(d, d)(x) inside forward()
""",
    maybe_fine=(""),
    evidence=("a module with parameters runs inside a model's forward but is not in model.modules(); not when the "
              "model registers all of its parameters another way (an nn.ParameterList built from them) and it has "
              "no layer that train()/eval() changes: then nothing is lost"),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: the layers run in forward() but are invisible to .parameters(), .to(), '
          'state_dict() and the optimizer, so they are never trained or saved.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/model.py',
)
