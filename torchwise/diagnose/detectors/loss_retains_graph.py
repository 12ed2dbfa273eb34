"""loss-retains-graph: Loss tensors are kept with their whole computation graph."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='loss-retains-graph',
    severity='error',
    title='Loss tensors are kept with their whole computation graph',
    why=("Storing `loss` (not `loss.item()`) in a list or a running sum keeps every step's graph and activations "
         'alive: memory grows each step until it runs out.'),
    fix="""
running_loss += loss.item()        # a Python float, not the tensor
losses.append(loss.item())         # or loss.detach()
""",
    maybe_fine=(""),
    evidence=("a backward()'ed loss added into a total made at an earlier step; a loss tensor, or its graph inside "
              "another tensor's, alive 3+ steps after its backward(); or an evaluation pass's loss graphs alive at "
              "the pass's end"),
    applies_to=ALL_OBJECTIVES,
    harm=("The run is harmed: memory grows with every step, because a container of the user's program that can grow"
          " (named in the evidence) keeps each step's autograd graph alive; a variable rebound at the next pass is "
          'no finding.'),
    explains=(),
    decided_in='checks/model.py',
)
