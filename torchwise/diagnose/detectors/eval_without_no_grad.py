"""eval-without-no-grad: Evaluation forwards build an autograd graph that is never used."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='eval-without-no-grad',
    severity='info',
    title='Evaluation forwards build an autograd graph that is never used',
    why=('Without torch.no_grad() (or torch.inference_mode()) every forward keeps its activations for a backward() '
         'that never comes: evaluation takes about twice the memory (a common cause of CUDA out-of-memory in the '
         'validation loop) and runs slower.'),
    fix="""
model.eval()
with torch.no_grad():              # or torch.inference_mode()
    for x, y in val_loader:
        val_loss += criterion(model(x), y).item()
model.train()
""",
    maybe_fine=('The results are the same with or without no_grad: only memory and time are spent. For a few '
                'forwards (a shape check, a sample generated now and then, a full-graph evaluation no larger than a'
                ' training step) that cost is small.'),
    evidence=('a model forward with gradients enabled whose graph no backward() reaches within the next 2 optimizer'
              ' steps'),
    applies_to=ALL_OBJECTIVES,
    harm=(""),
    explains=(),
    decided_in='checks/followed.py',
)
