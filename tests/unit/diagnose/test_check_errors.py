"""Readable errors: real PyTorch crashes translated into what happened and the fix."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from torchwise.diagnose.error_translation import translate


def error_of(fn) -> BaseException:
    with pytest.raises(BaseException) as info:
        fn()
    return info.value


def test_linear_in_features_mismatch_gives_the_right_number():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(256, 10))
    text = translate(error_of(lambda: model(torch.randn(2, 1, 12, 12))))
    assert "expects 256 input features but gets 400" in text and "nn.Linear(400, 10)" in text


def test_target_out_of_bounds():
    text = translate(error_of(lambda: nn.functional.cross_entropy(torch.randn(4, 10), torch.tensor([1, 2, 10, 3]))))
    assert "label 10" in text and "y = y - 1" in text


def test_dtype_mismatch():
    text = translate(error_of(lambda: nn.Linear(3, 2)(torch.randn(4, 3, dtype=torch.float64))))
    assert "dtype" in text and ".float()" in text


def test_device_mismatch_message():
    exc = RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                       "cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_addmm)")
    text = translate(exc)
    assert "cuda:0 and cpu" in text and "model.to(device)" in text


def test_out_of_memory_lists_remedies_in_order():
    text = translate(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    lines = [line.strip() for line in text.splitlines()]
    order = [next(i for i, s in enumerate(lines) if s.startswith(f"{k}.")) for k in range(1, 7)]
    assert order == sorted(order) and "batch_size" in lines[order[0]]


def test_state_dict_module_prefix():
    model = nn.Linear(2, 2)
    state = {"module." + k: v for k, v in model.state_dict().items()}
    text = translate(error_of(lambda: model.load_state_dict(state)))
    assert "'module.'" in text and 'removeprefix("module.")' in text


def test_backward_without_graph_and_second_backward_and_bn_batch_of_one():
    w = nn.Linear(2, 1)
    with torch.no_grad():
        loss = w(torch.randn(3, 2)).sum()
    assert "not connected to any trainable parameter" in translate(error_of(loss.backward))
    loss = (w(torch.randn(3, 2)) ** 2).sum()
    loss.backward()
    assert ".item()" in translate(error_of(loss.backward))
    bn = nn.BatchNorm1d(4)
    assert "drop_last=True" in translate(error_of(lambda: bn(torch.randn(1, 4))))


def test_unknown_error_is_not_translated():
    assert translate(ValueError("something else")) is None


def test_inplace_modification_shows_the_tensor_and_the_fix():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            out = torch.sigmoid(self.fc(x))   # sigmoid's backward needs its output ...
            out += x                          # ... which this changes in place
            return out

    text = translate(error_of(lambda: Block()(torch.randn(2, 4)).sum().backward()))
    assert "changed in place" in text
    assert "shape [2, 4]" in text and "Sigmoid" in text and "version 0 -> 1" in text
    assert "x = x + residual" in text and "set_detect_anomaly(True)" in text


def test_cross_entropy_target_of_shape_n_by_1():
    logits, y = torch.randn(4, 10), torch.tensor([[1], [2], [0], [3]])
    text = translate(error_of(lambda: nn.CrossEntropyLoss()(logits, y)))
    assert "2-D target" in text and "logits (4, 10), targets (4, 1)" in text
    assert "y.squeeze(1).long()" in text


def test_conv_input_channel_mismatch():
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU())
    text = translate(error_of(lambda: model(torch.randn(8, 1, 32, 32))))   # grayscale into an RGB conv
    assert "expects 3 input channels but the input [8, 1, 32, 32] has 1" in text
    assert "nn.Conv2d(1, 16, kernel_size=...)" in text and "Grayscale(3)" in text


def test_cuda_checkpoint_loaded_on_a_cpu_only_machine(tmp_path):
    import zipfile

    assert not torch.cuda.is_available()   # the error only exists on a machine without a GPU
    cpu_file, gpu_file = tmp_path / "cpu.pt", tmp_path / "gpu.pt"
    torch.save(nn.Linear(3, 2).state_dict(), cpu_file)
    # what a GPU machine writes: the same archive with the storages' location tag 'cuda:0' instead of 'cpu'
    # (pickle protocol 2 BINUNICODE strings: opcode X, 4-byte length, the text)
    with zipfile.ZipFile(cpu_file) as zin, zipfile.ZipFile(gpu_file, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                assert b"X\x03\x00\x00\x00cpu" in data   # written once, then referenced through the memo
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            zout.writestr(info, data)
    exc = error_of(lambda: torch.load(gpu_file))
    assert "Attempting to deserialize object on a CUDA device" in str(exc)
    text = translate(exc)
    assert "saved on cuda:0" in text and "gpu.pt" in text and "is_available() is False" in text
    assert 'torch.load(path, map_location="cpu")' in text
    assert torch.load(gpu_file, map_location="cpu")["weight"].shape == (2, 3)   # the fix works


def test_module_without_super_init():
    class Net(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(4, 2)   # forgot super().__init__()

    text = translate(error_of(Net))
    assert "Net.__init__ sets a layer on self (assigning self.fc) before nn.Module.__init__()" in text
    assert "super().__init__()" in text and "class Net(nn.Module):" in text


def test_collate_of_pil_images_and_of_none():
    from PIL import Image
    from torch.utils.data import DataLoader

    images = [(Image.new("RGB", (8, 8)), 0), (Image.new("RGB", (8, 8)), 1)]
    text = translate(error_of(lambda: next(iter(DataLoader(images, batch_size=2)))))
    assert "__getitem__ returned a PIL.Image.Image" in text and "PILToTensor()" in text

    for samples in ([None, (torch.zeros(2), 0)], [(torch.zeros(2), None), (torch.zeros(2), 0)],
                    [(torch.zeros(2), 0), None]):   # the last: "object of type 'NoneType' has no len()"
        text = translate(error_of(lambda: next(iter(DataLoader(samples, batch_size=2)))))
        assert "__getitem__ returned None" in text and "s is not None" in text, samples
    assert translate(error_of(lambda: len(None))) is None   # the same TypeError outside a DataLoader
