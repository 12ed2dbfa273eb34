"""Warnings raised inside torch calls keep the place and the fate they have without the checker.

`torchwise check` runs torch calls through a TorchFunctionMode (diagnose/watch.py); a warning aimed at the
caller (F.softmax's implicit dim, a C++ TORCH_WARN) must still name the user's line, and the user's filters
("error", "ignore", catch_warnings) must decide it exactly as they do in a plain run.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


TRAIN = """
import warnings
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Linear(6, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
for step in range(4):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


def _script(tmp_path: Path, tail: str) -> Path:
    path = tmp_path / "train_warn.py"
    path.write_text(TRAIN + textwrap.dedent(tail))
    return path


def _plain(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script.name], cwd=script.parent, capture_output=True, text=True,
                          timeout=120)


def _checked(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchwise", "check", "--", sys.executable, script.name],
                          cwd=script.parent, capture_output=True, text=True, timeout=180)


def _warning_lines(stderr: str) -> list[str]:
    """'file:line: Category: message' lines, with the file reduced to its name."""
    out = []
    for line in stderr.splitlines():
        m = re.match(r"^(.*?):(\d+): (\w*Warning): (.*)$", line)
        if m:
            out.append(f"{Path(m.group(1)).name}:{m.group(2)}: {m.group(3)}: {m.group(4)}")
    return out


def _stdout_of_script(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not line.startswith(("torchwise", "coverage", "  "))
            and line.strip()]


@pytest.mark.parametrize("tail", [
    # a warning of a torch function written in Python (stacklevel aimed at the caller), shown once per line
    """
    for _ in range(3):
        p = F.softmax(model(x))
    q = F.softmax(model(x))
    print("done")
    """,
    # a C++ TORCH_WARN (the .grad of a tensor that is not a leaf), every time, under "always"
    """
    warnings.simplefilter("always")
    h = model(x).sum()
    for _ in range(2):
        g = h.grad
    print("done")
    """,
], ids=["python-stacklevel", "cpp-torch-warn"])
def test_warning_names_the_users_line(tmp_path, tail):
    script = _script(tmp_path, tail)
    plain, checked = _plain(script), _checked(script)
    assert plain.returncode == 0, plain.stderr
    want = _warning_lines(plain.stderr)
    assert want and all(w.startswith("train_warn.py:") for w in want), plain.stderr
    got = _warning_lines(checked.stderr)
    assert got == want, checked.stderr
    assert "watch.py" not in checked.stderr and "function_mode.py" not in checked.stderr
    assert _stdout_of_script(checked.stdout) == _stdout_of_script(plain.stdout) == ["done"]


@pytest.mark.parametrize("tail", [
    """
    warnings.simplefilter("error")
    try:
        F.softmax(model(x))
        print("not raised")
    except UserWarning as exc:
        print("raised:", type(exc).__name__, str(exc).split(".")[0])
    """,
    """
    warnings.simplefilter("error")
    h = model(x).sum()
    try:
        h.grad
        print("not raised")
    except UserWarning as exc:
        print("raised:", type(exc).__name__)
    """,
    """
    warnings.filterwarnings("ignore", message="Implicit dimension")
    F.softmax(model(x))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        F.log_softmax(model(x))
    print("recorded:", len(seen), sorted({w.filename.rsplit("/", 1)[-1] for w in seen}), [w.lineno for w in seen])
    """,
], ids=["error-python", "error-cpp", "ignore-and-record"])
def test_filters_decide_as_without_the_checker(tmp_path, tail):
    script = _script(tmp_path, tail)
    plain, checked = _plain(script), _checked(script)
    assert plain.returncode == 0, plain.stderr
    lines = _stdout_of_script(plain.stdout)
    assert lines and not any("not raised" in s for s in lines), plain.stdout
    assert _stdout_of_script(checked.stdout) == lines, checked.stdout + checked.stderr
    assert _warning_lines(checked.stderr) == _warning_lines(plain.stderr)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_filters_restored_after_each_call():
    """In-process: the watcher leaves warnings.filters and the show function as it found them."""
    import warnings

    import torch

    from torchwise.diagnose.watch import Watcher
    before_filters, before_show = warnings.filters, warnings._showwarnmsg
    w = Watcher(check_mode=True)
    w.attach()
    try:
        torch.add(torch.ones(2), 1)
        assert warnings.filters is before_filters and warnings._showwarnmsg is before_show
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.softmax(torch.ones(2, 2), 0)
            torch.nn.functional.softmax(torch.ones(2, 2))
        assert [Path(s.filename).name for s in seen] == [Path(__file__).name]
    finally:
        w.detach()
    assert warnings.filters is before_filters and warnings._showwarnmsg is before_show
