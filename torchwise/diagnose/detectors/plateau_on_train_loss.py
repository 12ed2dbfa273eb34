"""plateau-on-train-loss: ReduceLROnPlateau is fed a training metric."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector


def harm_seen(finding, found: set, w) -> bool:
    """The run evaluates, so a validation metric was at hand, and the scheduler was given the training one."""
    return w.loaders.eval_seen

DETECTOR = Detector(
    id='plateau-on-train-loss',
    severity='warning',
    title='ReduceLROnPlateau is fed a training metric',
    why=('ReduceLROnPlateau lowers the LR when its metric stops improving; the training loss keeps improving while '
         'the model overfits, and per-batch losses are noise, so the LR drops at the wrong times or never.'),
    fix="""
val_loss = evaluate(model, val_loader)   # under model.eval() and torch.no_grad()
scheduler.step(val_loss)                 # once per epoch, with the validation metric
""",
    maybe_fine=('This script evaluates nothing, so the training loss is the only metric it has to give; an epoch\'s '
                'mean training loss into ReduceLROnPlateau is a common choice there.'),
    evidence=('ReduceLROnPlateau.step(metric) with no evaluation pass since its previous call'),
    applies_to=ALL_OBJECTIVES,
    harm=('The run is harmed when it evaluates: a validation metric is at hand, yet ReduceLROnPlateau is stepped '
          'with no evaluation since its last call, so it cuts the learning rate on the training loss it was meant '
          'to keep from overfitting; in a script with no evaluation at all an info hint.'),
    explains=(),
    decided_in='checks/calls.py',
    harm_seen=harm_seen,
)
