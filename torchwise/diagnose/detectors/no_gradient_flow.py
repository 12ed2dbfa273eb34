"""no-gradient-flow: Parameters receive no gradient."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='no-gradient-flow',
    severity='error',
    title='Parameters receive no gradient',
    why=('The computation graph is cut before them (.detach(), .item(), .numpy(), .data, torch.tensor(...) on an '
         'intermediate result), they are not used in forward, or zero_grad() runs between backward() and step(): '
         'these parameters never learn.'),
    fix="""
h = self.encoder(x)                # keep the result in the graph: no .detach()/.item()/.numpy()/.data
out = self.head(h)
loss.backward()
optimizer.step()
optimizer.zero_grad()              # clear after step() (or before forward), never between backward and step
""",
    maybe_fine=(""),
    evidence=('optimizer parameters whose .grad is None at every checked step()'),
    applies_to=ALL_OBJECTIVES,
    harm=('Wrong whatever happens: optimizer parameters of layers that run in the forward never receive a gradient '
          'at any checked step, so they never change. Parameters of layers that never run (a leftover layer) change '
          'nothing the model computes: an info hint.'),
    explains=('loss-not-decreasing',),
    decided_in='checks/grad_flow.py',
)
