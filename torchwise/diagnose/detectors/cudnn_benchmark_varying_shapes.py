"""cudnn-benchmark-varying-shapes: cudnn.benchmark is on while the input shapes keep changing."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='cudnn-benchmark-varying-shapes',
    severity='warning',
    title='cudnn.benchmark is on while the input shapes keep changing',
    why=('With torch.backends.cudnn.benchmark = True, cuDNN times every convolution algorithm the first time it '
         'meets an input shape and keeps the fastest. With fixed shapes that one search makes the run 5-20% faster;'
         ' with shapes that keep changing (texts of different lengths, images of different sizes) it searches again'
         ' for every new shape, and the run gets slower instead. The cost is paid on a GPU: on the CPU the flag '
         'does nothing.'),
    fix="""
torch.backends.cudnn.benchmark = False   # input sizes vary: leave benchmark mode off (its default)
# or keep it on and make the shapes fixed: pad every text to one length (or to a few bucket lengths)
x = nn.functional.pad(x, (0, max_len - x.shape[1]), value=pad_id)
""",
    maybe_fine=(""),
    evidence=('torch.backends.cudnn.benchmark read at each training forward of a model with convolution layers; '
              'more than 8 different per-sample input shapes (the batch dimension left out) while it was True'),
    applies_to=ALL_OBJECTIVES,
    harm=('The run is harmed on a GPU: cuDNN searches its algorithms again for each of the many input shapes '
          'measured.'),
    explains=(),
    decided_in='checks/data.py',
)
