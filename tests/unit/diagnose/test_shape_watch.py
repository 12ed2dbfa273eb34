"""cudnn.benchmark goes off when the training inputs keep changing shape (the seed's advice), and
stays on for fixed shapes, short last batches, halved micro-batches and a few bucketed sizes.
The shapes come from real DataLoaders; the Trainer's switch itself is tested on a GPU
(tests/integration/test_gpu_fast.py), the only place where the flag does anything."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from torchwise.diagnose.shape_watch import ShapeWatch, wanted


class VariableImages(Dataset):
    """Images whose width depends on the index, as photos of different sizes would have."""

    def __init__(self, widths):
        self.widths = widths

    def __len__(self):
        return len(self.widths)

    def __getitem__(self, i):
        return torch.randn(3, 16, self.widths[i]), i % 2


def watch_loader(loader, epochs=1):
    watch, reasons = ShapeWatch(), []
    for _ in range(epochs):
        for x, _ in loader:
            why = watch.see((x,))
            if why:
                reasons.append(why)
    return watch, reasons


def test_fixed_shapes_with_a_short_last_batch_never_trip_it():
    data = TensorDataset(torch.randn(100, 3, 16, 16), torch.zeros(100, dtype=torch.long))
    watch, reasons = watch_loader(DataLoader(data, batch_size=16, shuffle=True), epochs=3)
    assert reasons == [] and len(watch.shapes) == 1 and watch.batches == 21  # batches of 16 and a last of 4, three times


def test_halved_micro_batches_and_a_few_buckets_never_trip_it():
    watch = ShapeWatch()
    for width in (16, 24, 32, 48, 64):  # five bucketed sizes, each seen whole and halved by on_oom="adapt"
        for batch in (16, 8, 4, 3):
            for _ in range(3):
                assert watch.see((torch.zeros(batch, 3, 16, width), torch.zeros(batch))) is None
    assert len(watch.shapes) == 5 and not watch.tripped


def test_shapes_that_keep_changing_trip_it_once_with_the_numbers():
    data = VariableImages([16 + (i % 20) for i in range(60)])  # 20 widths, batch 1: a new shape per batch at first
    watch, reasons = watch_loader(DataLoader(data, batch_size=1), epochs=2)
    assert len(reasons) == 1 and watch.tripped
    why = reasons[0]
    assert "9 different sample shapes in 9 batches" in why and "3x16x16, 3x16x17, 3x16x18" in why
    assert "cudnn.benchmark is switched off" in why and "fixed sizes" in why


def test_several_inputs_count_as_one_shape_key():
    watch = ShapeWatch(limit=2)
    assert watch.see((torch.zeros(2, 3), torch.zeros(2, 5), "mask")) is None
    assert watch.see((torch.zeros(2, 3), torch.zeros(2, 6), "mask")) is None
    why = watch.see((torch.zeros(2, 4), torch.zeros(2, 6), "mask"))
    assert why and "(3, 5), (3, 6), (4, 6)" in why


def test_it_watches_only_convolutional_models_on_cuda():
    conv = nn.Sequential(nn.Conv1d(4, 8, 3), nn.ReLU())
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    assert not wanted(conv, torch.device("cpu"))  # the flag does nothing on the CPU
    assert not wanted(mlp, torch.device("cuda", 0))
    saved = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        assert wanted(conv, torch.device("cuda", 0))  # a text CNN over padded sequences is the seed's case
        torch.backends.cudnn.benchmark = False
        assert not wanted(conv, torch.device("cuda", 0))  # deterministic runs keep it off anyway
    finally:
        torch.backends.cudnn.benchmark = saved
