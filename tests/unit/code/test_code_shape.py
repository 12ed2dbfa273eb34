"""The package's code keeps the shape issue 17 set: no file over 500 lines, no function over 60 lines
without a comment saying why it is long, and no module reading another object's private attributes;
and no module file name used twice across the package's folders (`__init__.py` aside), so a file's name
alone says which file it is; and no class built from several of the package's own classes (mixins spread
one object over files: the parts are objects it owns instead, as the Trainer's are).

"Private" means a leading-underscore name that torchwise itself defines (an attribute it assigns, a
function, method or class attribute it defines): reading one from outside its object couples two modules
through a detail the owner may change. Third-party privates (sys._getframe, torch._foreach_norm, ...) are
outside this rule; where the package relies on one, the line says why.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from conftest import REPO_ROOT


ROOT = REPO_ROOT / "torchwise"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
# A function may be longer when its first lines say why: "# Long because ...", "long on purpose",
# "Over 60 lines: ...".
WHY_LONG = re.compile(r"long because|long on purpose|over 60 lines", re.IGNORECASE)

# Empty since issue 17: the tests fail on any new entry (and on a listed one that is fixed).
KNOWN_LONG_FILES: set[str] = set()
KNOWN_LONG_FUNCTIONS: set[str] = set()
KNOWN_PRIVATE_READS: set[str] = set()
# Third-party privates whose names torchwise also assigns (so the scan cannot tell them apart), with why.
THIRD_PARTY: dict[str, str] = {
    "torchwise/diagnose/function_mode.py:_warnings._showwarnmsg": "the warnings module's one hook that sees every "
        "warning with its frame; the watcher wraps it and restores it (public showwarning misses filters)",
    "torchwise/train/step/step_wrappers.py:p._version": "a tensor's version counter (torch's): how the compile "
        "fallback knows whether a failed step already changed a parameter in place",
    "torchwise/script_check/runner.py:os._exit": "Python's immediate process end: check reports before a script's "
        "own os._exit() ends the process (wrapped while the script runs, restored after), and ends it itself "
        "after a forced stop",
    "torchwise/tune/worker.py:os._exit": "Python's immediate process end: a tuning worker that must not run its "
        "parent's cleanup",
}


def python_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def long_files(root: Path = ROOT) -> set[str]:
    return {str(p.relative_to(root.parent)) for p in python_files(root)
            if len(p.read_text(encoding="utf-8").splitlines()) > MAX_FILE_LINES}


def long_functions(root: Path = ROOT) -> dict[str, int]:
    """'torchwise/x.py:Class.method' -> its length, for functions over the limit with no reason given."""
    found = {}
    for path in python_files(root):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    length = child.end_lineno - child.lineno + 1
                    head = "\n".join(lines[child.lineno - 1: child.lineno + 4])
                    if length > MAX_FUNCTION_LINES and not WHY_LONG.search(head):
                        found[f"{path.relative_to(root.parent)}:{name}"] = length
                    visit(child, f"{name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(text), "")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names(root: Path = ROOT) -> set[str]:
    """Every leading-underscore name torchwise defines: attributes it assigns, functions, classes."""
    names = set()
    for path in python_files(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
                names.add(node.id)
    return names


def private_reads(root: Path = ROOT) -> set[str]:
    """'torchwise/x.py:obj._name' for each read of a torchwise private through anything but self/cls,
    and each `from torchwise.m import _name` (another module's private)."""
    own = private_names(root)
    found = set()
    for path in python_files(root):
        where = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in own:
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                found.add(f"{where}:{ast.unparse(base)}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchwise"):
                for alias in node.names:
                    if _private(alias.name):
                        found.add(f"{where}:from {node.module} import {alias.name}")
    return found


def repeated_module_names(root: Path = ROOT) -> dict[str, list[str]]:
    """'name.py' -> the files of that name, for each module file name found in more than one folder."""
    where: dict[str, list[str]] = {}
    for path in python_files(root):
        if path.name != "__init__.py":
            where.setdefault(path.name, []).append(str(path.relative_to(root.parent)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def _package_names(tree: ast.Module, package: str) -> tuple[set[str], set[str]]:
    """(names bound to the package's classes or functions, names bound to the package's modules) in one
    module: its own top-level classes, and what it imports from the package (relative imports included)."""
    names = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == package):
            for alias in node.names:  # `from pkg import mod` or `from pkg.mod import Class`: both the package's
                names.add(alias.asname or alias.name)
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    modules.add(alias.asname or alias.name.split(".")[0])
    return names, modules


def _is_package_base(base: ast.expr, names: set[str], modules: set[str]) -> bool:
    if isinstance(base, ast.Subscript):  # Generic[T], a package class with parameters
        base = base.value
    if isinstance(base, ast.Name):
        return base.id in names
    if isinstance(base, ast.Attribute):  # mod.Class, pkg.mod.Class: resolved through the outermost name
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in modules
    return False


def several_package_bases(root: Path = ROOT) -> dict[str, int]:
    """'torchwise/x.py:Class' -> how many of its bases are the package's own classes, for each class with more
    than one (bases resolved by name through the module's imports; torch's, typing's, the standard
    library's and other packages' classes do not count)."""
    found = {}
    for path in python_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names, modules = _package_names(tree, root.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                count = sum(_is_package_base(base, names, modules) for base in node.bases)
                if count > 1:
                    found[f"{path.relative_to(root.parent)}:{node.name}"] = count
    return found


# Classes made of several of the package's classes (mixins spreading one object over files), each with why
# it is still one; the test fails on any other and on a listed one that no longer is (so the list only shrinks).
KNOWN_MIXINS: dict[str, str] = {}


def _check(found: set[str], known: set[str], what: str, fix: str) -> None:
    new = sorted(found - known)
    gone = sorted(known - found)
    assert not new, f"{what}:\n" + "\n".join(f"  {item}" for item in new) + f"\n{fix}"
    assert not gone, f"fixed, remove from the known list in this file: {gone}"


def test_no_file_over_500_lines():
    _check(long_files(), KNOWN_LONG_FILES, f"files over {MAX_FILE_LINES} lines",
           "split the file into modules named for what each does")


def test_no_function_over_60_lines_without_a_reason():
    found = long_functions()
    _check({f"{k} ({v} lines)" for k, v in found.items()}, KNOWN_LONG_FUNCTIONS,
           f"functions over {MAX_FUNCTION_LINES} lines with no comment saying why",
           "split it, or say in its first lines why it is long ('# Long because ...')")


def test_no_module_reads_another_objects_private_attributes():
    _check(private_reads() - set(THIRD_PARTY), KNOWN_PRIVATE_READS, "reads of another object's private attribute",
           "make it public (no underscore) on its owner, or ask the owner through a method")


def test_no_class_has_several_package_bases():
    _check(set(several_package_bases()), set(KNOWN_MIXINS), "classes with more than one base class from torchwise",
           "compose instead: make each part an object the class owns, seeing it through a narrow Protocol "
           "(train/state/run_files.py's RunView; the Trainer's parts in train/trainer.py)")


def test_no_module_file_name_repeats_across_folders():
    repeated = repeated_module_names()
    assert not repeated, "module file names used in more than one folder:\n" + "\n".join(
        f"  {name}: {', '.join(paths)}" for name, paths in sorted(repeated.items())) + \
        "\nrename one so the name says what it does (e.g. cli/<name>_command.py for a command's module)"


def test_the_shape_checks_can_fail(tmp_path):
    """Each check finds what it should in a small package made here."""
    pkg = tmp_path / "torchwise"
    pkg.mkdir()
    (pkg / "big.py").write_text("x = 1\n" * 501)
    body = "\n".join(f"    y{i} = {i}" for i in range(61))
    (pkg / "fns.py").write_text(f"def long_one():\n{body}\n\n\ndef long_said():\n    # Long because: a test\n{body}\n")
    (pkg / "owner.py").write_text("class A:\n    def __init__(self):\n        self._secret = 1\n")
    (pkg / "reader.py").write_text("def peek(a):\n    return a._secret\n\n\nfrom torchwise.owner import _hidden\n")
    for folder in ("a", "b"):
        (pkg / folder).mkdir()
        (pkg / folder / "__init__.py").write_text("")
        (pkg / folder / "names.py").write_text("")
    (pkg / "a" / "big.py").write_text("")
    (pkg / "mixins.py").write_text(
        "import torchwise.owner as o\nfrom torch import nn\nfrom typing import Generic\nfrom .owner import A\n"
        "class B: pass\nclass C(A, B): pass\nclass D(A, nn.Module, Generic): pass\nclass E(o.A, B[int]): pass\n")
    assert long_files(pkg) == {"torchwise/big.py"}
    assert several_package_bases(pkg) == {"torchwise/mixins.py:C": 2, "torchwise/mixins.py:E": 2}
    assert list(long_functions(pkg)) == ["torchwise/fns.py:long_one"]
    assert repeated_module_names(pkg) == {"big.py": ["torchwise/a/big.py", "torchwise/big.py"],
                                          "names.py": ["torchwise/a/names.py", "torchwise/b/names.py"]}
    assert private_reads(pkg) == {"torchwise/reader.py:a._secret", "torchwise/reader.py:from torchwise.owner import _hidden"}
