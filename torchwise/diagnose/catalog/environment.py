"""Catalog entries for mistakes in how the run uses its machine: loader workers, pinned memory, processes, precision, cuDNN."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry, entry

ENTRIES: list[Entry] = [
    entry("dataloader-bottleneck", "warning", "Training waits for the data loader",
          "Most of each step is spent producing the batch, so the model (and the GPU) sits idle.",
          """
loader = DataLoader(ds, batch_size=64, shuffle=True,
                    num_workers=4, persistent_workers=True)   # load in parallel processes
# and move expensive, fixed preprocessing out of __getitem__ (do it once, cache the result)
"""),
    entry("pin-memory-misuse", "warning", "pin_memory=True while training on the CPU",
          "Pinned (page-locked) memory only speeds up copies to a GPU; on a CPU-only run it costs time "
          "and locks RAM for nothing.",
          """
use_cuda = torch.cuda.is_available()
loader = DataLoader(ds, batch_size=64, shuffle=True, pin_memory=use_cuda)
"""),
    entry("ddp-no-distributed-sampler", "error", "Distributed training without a DistributedSampler",
          "Every process iterates the whole data set in the same order, so the N GPUs compute the same "
          "batches: N times the cost for the speed of one, and each epoch is really N epochs.",
          """
sampler = DistributedSampler(train_ds, shuffle=True)        # each rank gets its own 1/N share
loader = DataLoader(train_ds, batch_size=64, sampler=sampler)   # no shuffle=True with a sampler
for epoch in range(epochs):
    sampler.set_epoch(epoch)
"""),
    entry("backward-in-autocast", "warning", "backward() or optimizer.step() runs inside the autocast block",
          "autocast is meant to wrap the forward pass and the loss computation only: the PyTorch AMP documentation "
          "advises against running backward under it. In eager mode it buys nothing (each backward op already runs in "
          "the dtype autocast chose for its forward op), and it can cost: torch.compile'd regions trace their backward "
          "under the forward's autocast, which has overflowed in fp16 where the eager backward did not (pytorch issue "
          "153044), and whatever autocast-eligible work the update path does (a custom optimizer's or a clipping "
          "helper's matmuls, metrics computed with matmuls) runs in reduced precision.",
          """
with torch.autocast("cuda", dtype=torch.bfloat16):   # the forward pass and the loss only
    loss = criterion(model(x), y)
loss.backward()                                     # after the block: backward ...
optimizer.step()                                    # ... and the update in full precision
# fp16 with a GradScaler, the same way: scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
"""),
    entry("cudnn-benchmark-varying-shapes", "warning", "cudnn.benchmark is on while the input shapes keep changing",
          "With torch.backends.cudnn.benchmark = True, cuDNN times every convolution algorithm the first time it meets "
          "an input shape and keeps the fastest. With fixed shapes that one search makes the run 5-20% faster; with "
          "shapes that keep changing (texts of different lengths, images of different sizes) it searches again for "
          "every new shape, and the run gets slower instead. The cost is paid on a GPU: on the CPU the flag does nothing.",
          """
torch.backends.cudnn.benchmark = False   # input sizes vary: leave benchmark mode off (its default)
# or keep it on and make the shapes fixed: pad every text to one length (or to a few bucket lengths)
x = nn.functional.pad(x, (0, max_len - x.shape[1]), value=pad_id)
"""),
]
