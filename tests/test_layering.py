"""The package's layers only point down: a module imports only from its own layer or the ones below.

The order, bottom to top, and why each sits where it does:

    version     the package version (any layer may print it)
    errors      what every layer raises
    config      the run configuration (typed, validated); knows nothing of torch
    weights     reading and writing weight files; models build on it
    models      model factories
    data        data sets, their scans, splits and transforms
    diagnose    the checker (watch, detectors): the Trainer runs it, so it sits below train
    train       the Trainer and what it owns (step, loaders, checkpoints, distributed)
    toolbox     tools that drive training (memory, batch size, OOM, gradient checkpointing)
    report      run reports (HTML, plots, metrics tables)
    export      ONNX / TorchScript / pt2 and their verification
    predict     predictions from an exported file (no torch)
    tune        hyperparameter search: train runs as trials
    env         the environment doctor
    cli         the commands; nothing in the package imports it
    (package)   torchwise/__init__.py and __main__.py: the public facade, on top of everything

Every import counts, also the ones inside functions (those are only deferred, not absent). The
imports that point up today are listed in KNOWN_UPWARD with the reason; the test fails on any other
(a new upward import) and on a listed one that is gone (so the list only shrinks).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "torchwise"

LAYERS = ["version", "errors", "config", "weights", "models", "data", "diagnose", "train", "toolbox", "report", "export",
          "predict", "tune", "env", "cli", "(package)"]

# (from layer, to layer): why it still points up. Issue 17 moves these; remove a line when its import goes.
KNOWN_UPWARD: dict[tuple[str, str], str] = {
    ("config", "data"): "data/numbers.py (reading numbers from text) belongs below config: move it",
    ("weights", "train"): "the atomic file writer lives in train/checkpoint.py: move it to a low module",
    ("data", "train"): "data/loaders.py (the resumable loader and sampler) belongs to train/, its owner",
    ("diagnose", "train"): "lr-find drives a train step (move it next to the step); watch uses train/shape_watch",
    ("train", "report"): "the evaluation metrics are in report/metrics.py; the Trainer, eval and report share them",
    ("train", "(package)"): "run_files reads torchwise.__version__: read torchwise.version",
    ("export", "predict"): "export's verification previews a prediction; predict reads export/metadata (a cycle)",
    ("tune", "cli"): "a trial runs cli/train.py's train_run: the run orchestration belongs in the library",
}


def layer_of(module: str) -> str:
    """'torchwise.train.step' -> 'train'; 'torchwise.config' -> 'config'; the package itself -> '(package)'."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__init__", "__main__"):
        return "(package)"
    return parts[1]


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        name = ".".join((root.name, *path.relative_to(root).with_suffix("").parts))
        found[name.removesuffix(".__init__")] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules `name` imports (anywhere in the file), each resolved to a known module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from pkg import mod` depends on pkg.mod; `from pkg import name` on pkg itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            if not target.startswith(ROOT.name):
                continue
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                out.add(target)
    return out


def upward_imports(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(from layer, to layer) -> the imports (module -> module) that point up."""
    known = modules(root)
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in known.items():
        for target in imports_of(name, path, known):
            a, b = layer_of(name), layer_of(target)
            assert a in rank and b in rank, f"{name} or {target} is in no layer: add its folder to LAYERS"
            if rank[b] > rank[a]:
                found[(a, b)].append(f"{name} -> {target}")
    return dict(found)


def test_every_import_points_down_or_is_a_known_debt():
    found = upward_imports()
    new = {pair: where for pair, where in found.items() if pair not in KNOWN_UPWARD}
    gone = [pair for pair in KNOWN_UPWARD if pair not in found]
    assert not new, "imports that point up the layers (see the order in this file's docstring):\n" + "\n".join(
        f"  {a} -> {b}: {', '.join(where[:4])}" for (a, b), where in sorted(new.items()))
    assert not gone, f"these upward imports are gone: remove them from KNOWN_UPWARD: {gone}"


def test_an_added_upward_import_is_caught(tmp_path):
    """The test above can fail: a copy of the package with one upward import added."""
    import shutil

    copy = tmp_path / ROOT.name
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    errors_py = copy / "errors.py"
    errors_py.write_text(errors_py.read_text() + "\n\ndef _late():\n    from torchwise.cli import main  # noqa\n")
    found = upward_imports(copy)
    assert ("errors", "cli") in found and "torchwise.errors -> torchwise.cli.main" in found[("errors", "cli")]
