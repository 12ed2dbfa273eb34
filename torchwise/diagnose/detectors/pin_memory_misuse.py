"""pin-memory-misuse: pin_memory=True while training on the CPU."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='pin-memory-misuse',
    severity='info',
    title='pin_memory=True while training on the CPU',
    why=('Pinned (page-locked) memory only speeds up copies to a GPU; on a CPU-only run it costs time and locks RAM'
         ' for nothing.'),
    fix="""
use_cuda = torch.cuda.is_available()
loader = DataLoader(ds, batch_size=64, shuffle=True, pin_memory=use_cuda)
""",
    maybe_fine=('Without an accelerator torch ignores pin_memory (it warns and copies nothing), so this costs '
                'nothing here; it matters only if the script is meant for a GPU machine, where pin_memory=True is '
                'right.'),
    evidence=('pin_memory=True on a loader while every model parameter is on the CPU'),
    applies_to=ALL_OBJECTIVES,
    harm=(""),
    explains=(),
    decided_in='checks/data.py',
)
