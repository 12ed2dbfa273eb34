"""Never lose a run: weights and ONNX files that are missing, empty, cut off or something else are
refused by every entry point with what is wrong (no library traceback, the run left as it was);
wrapper prefixes are dropped only where a wrapper put them; `predict` predicts every readable
image of a folder and lists the unreadable ones."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import torchwise
from conftest import assert_clear_api_error, assert_clear_cli_error, tree_snapshot
from torchwise.cli.main import main
from torchwise.errors import TorchwiseError
from testkit.weights_run import COLORS, make_run, write_png




def cli(*args) -> subprocess.CompletedProcess:
    """`torchwise ARGS` run in this process (the same main() the command runs), output captured; an
    exception escaping main() is the traceback a user would see, so it fails the test as such."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory)


# ----------------------------------------------------------------------------- bad weights files

class Payload:
    def __reduce__(self):
        return (print, ("this would run on load",))


class WholeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)


def _safetensors_bytes(tmp: Path) -> bytes:
    torchwise.save_model(nn.Linear(16, 16), tmp / "real.safetensors")
    return (tmp / "real.safetensors").read_bytes()


def _torch_bytes(tmp: Path, obj) -> bytes:
    torch.save(obj, tmp / "obj.pt")
    return (tmp / "obj.pt").read_bytes()


# name -> (file name, bytes from a scratch dir, phrases the error must say)
BAD_WEIGHTS = {
    "empty": ("model.safetensors", lambda t: b"", ["empty (0 bytes)"]),
    "truncated safetensors": ("model.safetensors", lambda t: _safetensors_bytes(t)[:600], ["truncated", "bytes"]),
    "safetensors cut in its header": ("model.safetensors", lambda t: _safetensors_bytes(t)[:40],
                                      ["truncated or not a safetensors file (40 bytes"]),
    "text file": ("model.safetensors", lambda t: b"version https://git-lfs pointer\noid sha256:abc\n",
                  ["not a weights file", "text file", "version https://git-lfs"]),
    "random bytes": ("weights.bin", lambda t: bytes(range(7, 200)), ["not a weights file", "193 bytes"]),
    "truncated torch.save": ("model.pt", lambda t: _torch_bytes(t, nn.Linear(8, 8).state_dict())[:300],
                             ["truncated or damaged", "torch.save"]),
    "whole pickled model": ("model.pt", lambda t: _torch_bytes(t, WholeNet()),
                            ["whole pickled model object", "WholeNet", "save_model", "weights_only=False"]),
    "pickled custom object": ("model.pt", lambda t: _torch_bytes(t, {"state_dict": {}, "x": Payload()}),
                              ["pickled Python objects (it names", "print", "would run code"]),
    "no tensors": ("model.pt", lambda t: _torch_bytes(t, {"epoch": 3, "lr": 0.1}),
                   ["no state dict of tensors", "epoch", "float, int"]),
    "onnx model": ("model.safetensors", None, ["ONNX model", "torchwise predict"]),
}


def write_bad_weights(kind: str, folder: Path, run) -> Path:
    name, make, _ = BAD_WEIGHTS[kind]
    scratch = folder / ".scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    data = run["onnx"].read_bytes() if make is None else make(scratch)
    shutil.rmtree(scratch)
    path = folder / name
    path.write_bytes(data)
    return path


def fresh_model(run):
    from torchwise.models import build_model

    return build_model(**run["meta"]["model"])


@pytest.mark.parametrize("kind", list(BAD_WEIGHTS))
def test_python_api_refuses_a_bad_weights_file(kind, run, tmp_path, capsys):
    path = write_bad_weights(kind, tmp_path, run)
    for call in (lambda: torchwise.load_model(path, fresh_model(run)), lambda: torchwise.load_state_dict(path)):
        with pytest.raises(TorchwiseError) as info:
            call()
        text = assert_clear_api_error(info, str(path), *BAD_WEIGHTS[kind][2])
        assert "will likely succeed" not in text  # torch's advice to unpickle is not ours
    assert "this would run on load" not in capsys.readouterr().out


@pytest.fixture
def run_copy(run, tmp_path):
    """A copy of the run (without its export) that a test may break."""
    copy = tmp_path / "run"
    shutil.copytree(run["dir"], copy, ignore=shutil.ignore_patterns("export"))
    return copy


@pytest.mark.parametrize("kind", list(BAD_WEIGHTS))
def test_eval_and_export_refuse_a_bad_checkpoint_file_and_change_nothing(kind, run, run_copy):
    ckpt = run_copy / "checkpoints" / "step-000000010"
    ckpt.mkdir(parents=True)
    bad = write_bad_weights(kind, ckpt, run)
    before = tree_snapshot(run_copy)
    for args in (("eval", "--checkpoint", bad), ("export", bad)):
        assert_clear_cli_error(cli(*args), str(bad), *BAD_WEIGHTS[kind][2])
        assert tree_snapshot(run_copy) == before, args


@pytest.mark.parametrize("kind", ["empty", "truncated safetensors", "text file", "onnx model"])
def test_a_run_whose_final_weights_are_bad_is_refused_by_eval_and_export(kind, run, run_copy):
    final = run_copy / "final" / "model.safetensors"
    final.unlink()
    name, _, says = BAD_WEIGHTS[kind]
    write_bad_weights(kind, run_copy / "final", run).rename(final)
    before = tree_snapshot(run_copy)
    assert_clear_cli_error(cli("eval", "--run", run_copy), str(final), *says)
    assert_clear_cli_error(cli("export", run_copy), str(final), *says)
    assert tree_snapshot(run_copy) == before


@pytest.mark.parametrize("kind", ["truncated safetensors", "whole pickled model", "text file"])
def test_train_weights_refuses_a_bad_file_before_writing_anything(kind, run, tmp_path):
    bad = write_bad_weights(kind, tmp_path / "given", run)
    out = tmp_path / "out"
    before = tree_snapshot(tmp_path)
    proc = cli("train", "--data", run["images"], "--out", out, "--model", "mlp", "--weights", bad,
               "--epochs", "1", "--set", "train.threads=1")
    assert_clear_cli_error(proc, str(bad), *BAD_WEIGHTS[kind][2])
    assert tree_snapshot(tmp_path) == before


def test_missing_path_and_directory_without_weights(run, tmp_path):
    with pytest.raises(TorchwiseError) as info:
        torchwise.load_model(tmp_path / "nope.safetensors", fresh_model(run))
    assert_clear_api_error(info, "not found", "nope.safetensors")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(TorchwiseError) as info:
        torchwise.load_state_dict(tmp_path / "empty_dir")
    assert_clear_api_error(info, "No weights file found", "empty_dir")


@pytest.mark.parametrize("layout", ["pt named .safetensors", "safetensors named .pt", "legacy torch.save",
                                    "state_dict container", "checkpoint directory", "run directory"])
def test_weights_are_read_by_their_content_not_their_name(layout, run, tmp_path):
    """The neighbours that are fine: both readers are safe, so the bytes decide, not the suffix."""
    state = run["model"].state_dict()
    if layout == "pt named .safetensors":
        path = tmp_path / "w.safetensors"
        torch.save(state, path)
    elif layout == "safetensors named .pt":
        path = torchwise.save_model(run["model"], tmp_path / "w.pt")
    elif layout == "legacy torch.save":
        path = tmp_path / "w.pth"
        torch.save(state, path, _use_new_zipfile_serialization=False)
    elif layout == "state_dict container":
        path = tmp_path / "w.pt"
        torch.save({"state_dict": state, "epoch": 4}, path)
    elif layout == "checkpoint directory":
        path = tmp_path / "step-000000004"
        torchwise.save_model(run["model"], path / "model.safetensors")
    else:
        path = run["dir"]
    loaded = torchwise.load_model(path, fresh_model(run))
    for key, value in state.items():
        assert torch.equal(loaded.state_dict()[key], value)


# ----------------------------------------------------------------------------- wrappers

class EMA(nn.Module):
    """A wrapper of the user's own that keeps its network in an attribute named `module`."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.module = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
        self.register_buffer("decay", torch.tensor(0.99))

    def forward(self, x):
        return self.module(x)


class OnlyModule(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.module = nn.Linear(4, 3)

    def forward(self, x):
        return self.module(x)


class OrigModLike(nn.Module):
    """Attributes that merely look like torch.compile's (not an OptimizedModule): kept."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self._orig_mod = nn.Linear(4, 5)
        self.head = nn.Sequential()
        self.head.add_module("_fsdp_wrapped_module", nn.Linear(5, 3))

    def forward(self, x):
        return self.head(self._orig_mod(x))


class CompiledHead(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.body = nn.Linear(4, 5)
        self.head = torch.compile(nn.Linear(5, 3))  # wrapping only: nothing compiles until it is called

    def forward(self, x):
        return self.head(self.body(x))


def own_keys(model):
    return set(model.state_dict())


@pytest.mark.parametrize("make", [EMA, OnlyModule, OrigModLike])
@pytest.mark.parametrize("wrap", ["plain", "DataParallel", "torch.compile", "DataParallel(torch.compile)"])
def test_an_attribute_named_like_a_wrapper_survives_save_and_load(make, wrap, tmp_path):
    model = make()
    wrapped = {"plain": lambda m: m, "DataParallel": nn.DataParallel, "torch.compile": torch.compile,
               "DataParallel(torch.compile)": lambda m: nn.DataParallel(torch.compile(m))}[wrap](model)
    path = torchwise.save_model(wrapped, tmp_path / "m.safetensors")
    assert set(torchwise.load_state_dict(path)) == own_keys(model)  # the user's names, the wrappers' gone
    for target in (make(), nn.DataParallel(make()), torch.compile(make())):
        torch.manual_seed(99)
        for p in target.parameters():
            p.data.normal_()
        torchwise.load_model(path, target)
        inner = torchwise.weights.unwrap_model(target)
        for key, value in model.state_dict().items():
            assert torch.equal(inner.state_dict()[key], value), (wrap, key)


def test_a_file_saved_from_a_wrapped_model_elsewhere_fits_by_the_target_keys(tmp_path):
    """torch.save(DataParallel(EMA()).state_dict()): 'module.module.0.weight'; only the first
    'module' is the wrapper's, and only the target model can tell."""
    model = EMA()
    torch.save(nn.DataParallel(model).state_dict(), tmp_path / "ddp.pt")
    torch.save(torch.compile(model).state_dict(), tmp_path / "compiled.pt")
    for name in ("ddp.pt", "compiled.pt"):
        loaded = torchwise.load_model(tmp_path / name, EMA().apply(_scramble))
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    # A key that fits nothing even unwrapped is reported by its name in the file, not silently renamed.
    with pytest.raises(TorchwiseError) as info:
        torchwise.load_model(tmp_path / "ddp.pt", OnlyModule())
    assert_clear_api_error(info, "module.module.0.weight", "missing in file: module.weight")


def _scramble(module):
    for p in module.parameters(recurse=False):
        p.data.normal_()


def test_a_compiled_submodule_is_saved_clean_and_loads_both_ways(tmp_path):
    model = CompiledHead()
    path = torchwise.save_model(model, tmp_path / "c.safetensors")
    assert set(torchwise.load_state_dict(path)) == {"body.weight", "body.bias", "head.weight", "head.bias"}
    plain = nn.Module()
    plain.body, plain.head = nn.Linear(4, 5), nn.Linear(5, 3)
    torchwise.load_model(path, plain)
    torchwise.load_model(path, CompiledHead().apply(_scramble))
    assert torch.equal(plain.head.weight, model.head._orig_mod.weight)


def test_without_a_target_only_a_prefix_every_key_shares_is_stripped():
    from torchwise.weights import strip_wrapper_prefixes

    t = torch.zeros(1)
    assert set(strip_wrapper_prefixes({"module.a": t, "module.b.module.c": t})) == {"a", "b.module.c"}
    assert set(strip_wrapper_prefixes({"module.a": t, "head.b": t})) == {"module.a", "head.b"}
    assert set(strip_wrapper_prefixes({"_orig_mod.module.a": t})) == {"a"}


def test_the_trainer_resumes_a_model_with_a_module_attribute(tmp_path):
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=gen), torch.randint(0, 3, (64,), generator=gen))
    kwargs = dict(train_data=data, batch_size=32, progress=False, out_dir=tmp_path, tensorboard=False,
                  num_workers=0, device="cpu")
    sgd = lambda params: torch.optim.SGD(params, lr=0.1)  # noqa: E731
    torchwise.Trainer(EMA(), sgd, max_epochs=1, **kwargs).fit()
    result = torchwise.Trainer(EMA(), sgd, max_epochs=2, resume=True, **kwargs).fit()
    assert result.resumed_from is not None and result.steps == 4
    final = torchwise.load_model(tmp_path / "final" / "model.safetensors", EMA())
    assert set(torchwise.load_state_dict(tmp_path / "final")) == own_keys(final)


# ----------------------------------------------------------------------------- file modes

def test_weights_and_export_files_get_the_umask_mode(run, tmp_path):
    old = os.umask(0o022)
    try:
        path = torchwise.save_model(nn.Linear(2, 2), tmp_path / "m.safetensors")
        from torchwise.predict import write_results

        out = write_results([{"input": "a.png", "error": "empty file (0 bytes)"}], tmp_path / "p.csv")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert out.stat().st_mode & 0o777 == 0o644
    expected = 0o666 & ~old
    for name in ("model.onnx", "export_report.json"):  # written under this process's own umask
        assert (run["dir"] / "export" / name).stat().st_mode & 0o777 == expected, name
    assert (run["dir"] / "final" / "model.safetensors").stat().st_mode & 0o777 == expected


# ----------------------------------------------------------------------------- bad ONNX files

BAD_ONNX = {
    "empty": (lambda r: b"", ["empty (0 bytes)"]),
    "truncated": (lambda r: r["onnx"].read_bytes()[: r["onnx"].stat().st_size // 2], ["truncated or damaged"]),
    "text": (lambda r: b"<html>404 Not Found</html>\n", ["text file", "404 Not Found"]),
    "safetensors": (lambda r: (r["dir"] / "final" / "model.safetensors").read_bytes(), ["safetensors weights file"]),
    "torch.save": (lambda r: _torch_bytes(r["root"], {"w": torch.ones(2)}), ["torch.save file"]),
    "garbage": (lambda r: b"\x08\x07" + bytes(range(200, 256)) * 3, ["truncated or damaged", "170 bytes"]),
}


@pytest.mark.parametrize("kind", list(BAD_ONNX))
def test_predict_and_verify_refuse_a_bad_onnx_file(kind, run, tmp_path):
    from torchwise.export.verify import verify_onnx
    from torchwise.predict import predict

    make, says = BAD_ONNX[kind]
    bad = tmp_path / "model.onnx"
    bad.write_bytes(make(run))
    image = next(run["images"].rglob("*.png"))
    with pytest.raises(TorchwiseError) as info:
        predict(bad, [str(image)])
    assert_clear_api_error(info, str(bad), *says)
    with pytest.raises(TorchwiseError) as info:
        verify_onnx(run["model"], bad, [])
    assert_clear_api_error(info, *says)
    before = tree_snapshot(tmp_path)
    assert_clear_cli_error(cli("predict", bad, image, "--out", tmp_path / "p.csv"), str(bad), *says)
    assert tree_snapshot(tmp_path) == before


# ----------------------------------------------------------------------------- bad images in predict

def _png_header_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height pixels (a decompression bomb, never decoded)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


@pytest.fixture
def mixed_folder(run, tmp_path):
    """Good images in every mode a user has (RGB, 16-bit, palette, RGBA, grayscale, a big photo) and
    every kind of bad file next to them."""
    folder = tmp_path / "inbox"
    good = [write_png(folder / "a_rgb.png", COLORS["red"]),
            write_png(folder / "b_gray.png", 120, mode="L"),
            write_png(folder / "c_rgba.png", (30, 200, 40, 128), mode="RGBA"),
            write_png(folder / "f_big.png", COLORS["blue"], size=(2400, 1800))]
    Image.fromarray(np.full((8, 8), 40000, dtype=np.uint16)).save(folder / "d_16bit.png")
    Image.new("RGB", (8, 8), COLORS["green"]).convert("P").save(folder / "e_palette.png")
    good += [folder / "d_16bit.png", folder / "e_palette.png"]
    whole = (folder / "a_rgb.png").read_bytes()
    bad = {"g_truncated.png": whole[: len(whole) // 2], "h_empty.jpg": b"",
           "i_text.jpg": b"this is not a picture\n", "j_bomb.png": _png_header_claiming(40000, 40000)}
    for name, data in bad.items():
        (folder / name).write_bytes(data)
    return folder, sorted(str(p) for p in good), {str(folder / n): n for n in bad}


def test_predict_gives_every_readable_image_its_prediction(run, mixed_folder, tmp_path):
    from torchwise.predict import predict, preprocess_image

    folder, good, bad = mixed_folder
    results = predict(run["onnx"], [str(folder)], top_k=2)
    assert [r["input"] for r in results] == sorted(good + list(bad))  # input order, nothing dropped
    by_input = {r["input"]: r for r in results}
    assert all("predictions" in by_input[p] and "error" not in by_input[p] for p in good)
    reasons = {bad[p]: by_input[p]["error"] for p in bad}
    assert "truncated or damaged" in reasons["g_truncated.png"]
    assert reasons["h_empty.jpg"] == "empty file (0 bytes)"
    assert "not an image file" in reasons["i_text.jpg"]
    assert "DecompressionBomb" in reasons["j_bomb.png"]
    # Decoded the way training decodes (imagefolder.read_image: real bit depth, alpha over white), not refused.
    from torchwise.data.imagefolder import read_image

    spec = json.loads(__import__("onnxruntime").InferenceSession(str(run["onnx"])).get_modelmeta()
                      .custom_metadata_map["torchwise.preprocess"])
    for name in ("b_gray.png", "c_rgba.png", "d_16bit.png", "e_palette.png"):
        read_image(folder / name, "RGB").save(tmp_path / f"as_rgb_{name}")
        assert np.array_equal(preprocess_image(str(folder / name), spec),
                              preprocess_image(str(tmp_path / f"as_rgb_{name}"), spec)), name


def test_predict_command_lists_the_bad_images_and_exits_3(run, mixed_folder, tmp_path):
    folder, good, bad = mixed_folder
    out = tmp_path / "predictions.csv"
    proc = cli("predict", run["onnx"], folder, "--out", out)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3 and "Traceback" not in text, text
    assert f"warning: {len(bad)} of {len(good) + len(bad)} inputs could not be read" in proc.stderr
    assert all(f"{p}: " in proc.stderr for p in bad)
    with out.open(newline="") as handle:
        rows = {row["input"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(good) | set(bad)
    assert all(rows[p]["class"] in COLORS and not rows[p]["error"] for p in good)
    assert all(rows[p]["error"] and not rows[p]["class"] for p in bad)
    as_json = cli("predict", run["onnx"], folder, "--json")
    assert as_json.returncode == 3
    assert sum("error" in r for r in json.loads(as_json.stdout)) == len(bad)
    assert "3 some inputs could not be read" in " ".join(cli_help("predict").split())


def cli_help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([command, "--help"])
    return out.getvalue()


def test_predict_on_only_bad_images_or_no_images(run, tmp_path):
    only_bad = tmp_path / "bad"
    only_bad.mkdir()
    (only_bad / "x.png").write_bytes(b"")
    proc = cli("predict", run["onnx"], only_bad)
    assert proc.returncode == 3 and "1 of 1 inputs could not be read" in proc.stderr
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    (nothing / "notes.txt").write_text("no images here")
    assert_clear_cli_error(cli("predict", run["onnx"], nothing), "No images found", str(nothing))


def test_export_verifies_on_the_readable_images_of_a_folder_with_bad_ones(run):
    assert any(f"12 real examples from {run['images']}" in n for n in run["export_notes"]), run["export_notes"]
