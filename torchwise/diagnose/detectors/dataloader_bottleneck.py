"""dataloader-bottleneck: Training waits for the data loader."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='dataloader-bottleneck',
    severity='warning',
    title='Training waits for the data loader',
    why=('Most of each step is spent producing the batch, so the model (and the GPU) sits idle.'),
    fix="""
loader = DataLoader(ds, batch_size=64, shuffle=True,
                    num_workers=4, persistent_workers=True)   # load in parallel processes
# and move expensive, fixed preprocessing out of __getitem__ (do it once, cache the result)
""",
    maybe_fine=(""),
    evidence=("time waiting in the loader's __next__ vs the whole step"),
    applies_to=ALL_OBJECTIVES,
    harm=('The run is harmed: the step waits for the loader most of the time (measured), and the wait is I/O the '
          'loading thread blocked on (it gave up its core, or read pages from disk) or leaves an accelerator idle, so '
          'more workers surely help; CPU work of this process, or a wait the busy machine made, is an info hint.'),
    explains=(),
    decided_in='checks/data.py',
)
