"""The package's layers only point down: a module imports only from its own layer or the ones below.

The order, bottom to top, and why each layer sits where it does, is in docs/ARCHITECTURE.md (the block
under its "layers" marker); this test reads it from there, so the doc and the test cannot disagree.

Every import counts, also the ones inside functions (those are only deferred, not absent). The
imports that point up would be listed in KNOWN_UPWARD with the reason (none is today); the test fails
on any other (a new upward import) and on a listed one that is gone (so the list only shrinks).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from conftest import REPO_ROOT


ROOT = REPO_ROOT / "torchwise"
ARCHITECTURE = ROOT.parent / "docs" / "ARCHITECTURE.md"
LAYERS_MARKER = "<!-- layers:"


def layers_from_doc(text: str) -> list[str]:
    """The first word of each line of the fenced block that follows the layers marker, bottom to top."""
    lines = text.splitlines()
    marker = next((i for i, line in enumerate(lines) if line.strip().startswith(LAYERS_MARKER)), None)
    assert marker is not None, f"docs/ARCHITECTURE.md has no {LAYERS_MARKER!r} marker before its layer list"
    assert lines[marker + 1].strip().startswith("```"), "the layers marker must be followed by a fenced block"
    end = next(i for i in range(marker + 2, len(lines)) if lines[i].strip().startswith("```"))
    layers = [line.split()[0] for line in lines[marker + 2:end] if line.strip()]
    assert len(layers) == len(set(layers)), f"a layer is listed twice in docs/ARCHITECTURE.md: {layers}"
    return layers


LAYERS = layers_from_doc(ARCHITECTURE.read_text(encoding="utf-8"))

# (from layer, to layer): why it points up. Empty since issue 17; an entry here needs a reason the review accepts.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> str:
    """'torchwise.train.step.body' -> 'train'; 'torchwise.config' -> 'config'; the package itself -> '(package)'."""
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


def upward_imports(root: Path = ROOT, layers: list[str] | None = None) -> dict[tuple[str, str], list[str]]:
    """(from layer, to layer) -> the imports (module -> module) that point up, for the order `layers`
    (default: docs/ARCHITECTURE.md's)."""
    known = modules(root)
    rank = {layer: i for i, layer in enumerate(layers or LAYERS)}
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in known.items():
        for target in imports_of(name, path, known):
            a, b = layer_of(name), layer_of(target)
            assert a in rank and b in rank, f"{name} or {target} is in no layer: add its folder to the layer list in docs/ARCHITECTURE.md"
            if rank[b] > rank[a]:
                found[(a, b)].append(f"{name} -> {target}")
    return dict(found)


def test_every_import_points_down_or_is_a_known_debt():
    found = upward_imports()
    new = {pair: where for pair, where in found.items() if pair not in KNOWN_UPWARD}
    gone = [pair for pair in KNOWN_UPWARD if pair not in found]
    assert not new, "imports that point up the layers (see the order in docs/ARCHITECTURE.md):\n" + "\n".join(
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


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a loop (strongly connected
    components of the import graph with more than one module), each sorted, the list sorted."""
    known = modules(root)
    graph = {name: sorted(imports_of(name, path, known)) for name, path in known.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(graph):  # Tarjan's algorithm, iterative (no recursion limit to worry about)
        if start in order:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                order[node] = low[node] = len(order)
                stack.append(node)
            for j in range(i, len(graph[node])):
                nxt = graph[node][j]
                if nxt not in order:
                    work += [(node, j + 1), (nxt, 0)]
                    break
                if nxt in stack:
                    low[node] = min(low[node], order[nxt])
            else:
                if low[node] == order[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return sorted(found)


# Import cycles tolerated, each with its reason (none since issue 17); the test fails on any other and
# on a listed one that is gone.
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_between_modules():
    found = import_cycles()
    new = [group for group in found if group not in KNOWN_CYCLES]
    gone = [group for group in KNOWN_CYCLES if group not in found]
    assert not new, "modules that import each other (break the loop: move what both need below them):\n" + \
        "\n".join("  " + " <-> ".join(group) for group in new)
    assert not gone, f"these import cycles are gone: remove them from KNOWN_CYCLES: {gone}"


def test_an_added_import_cycle_is_caught(tmp_path):
    """The cycle test can fail: a copy of the package where errors.py imports version.py and back."""
    import shutil

    copy = tmp_path / ROOT.name
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "version.py").write_text((copy / "version.py").read_text() + "\n\ndef _late():\n    from torchwise import errors  # noqa\n")
    (copy / "errors.py").write_text((copy / "errors.py").read_text() + "\n\ndef _late():\n    from torchwise import version  # noqa\n")
    assert ["torchwise.errors", "torchwise.version"] in import_cycles(copy)


def test_the_layer_order_is_read_from_the_architecture_doc():
    """The order the tests enforce is the doc's: every folder of the package is in it, and nothing else."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    files = {p.stem for p in ROOT.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert set(LAYERS) == folders | files | {"(package)"}, \
        "docs/ARCHITECTURE.md's layer list and the package's top-level modules differ"
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    # the doc with diagnose listed above train: the Trainer's imports of the checker then point up
    swapped = doc.replace("\ndiagnose ", "\n@@ ").replace("\ntrain ", "\ndiagnose ").replace("\n@@ ", "\ntrain ")
    layers = layers_from_doc(swapped)
    assert layers.index("diagnose") == layers.index("train") + 1
    assert ("train", "diagnose") in upward_imports(ROOT, layers)
