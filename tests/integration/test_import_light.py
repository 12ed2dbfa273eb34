"""`import torchwise` and `torchwise --help` stay light: torch and friends load only when used."""
import subprocess
import sys


HEAVY = ("torch", "torchvision", "matplotlib", "onnx", "onnxruntime", "optuna", "tensorboard", "sklearn")


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return set(out.split())


def test_import_torchwise_imports_nothing_heavy():
    assert not modules_after("import torchwise") & set(HEAVY)


def test_help_builds_every_subcommand_parser_without_torch():
    loaded = modules_after("from torchwise.cli.main import build_parser\nparser, mods = build_parser()\n"
                           "assert {'train', 'check', 'tune', 'export'} <= set(mods)")
    assert not loaded & set(HEAVY)
