"""Shared fixtures: small REAL data sets written to disk (PNG folders, CSV files) and a helper
that runs the `torchwise` command in a subprocess, as a user would.

The suite has two tiers (`make test` runs both, `make test-fast` only the first):

- tests/unit/: in this process, in seconds; it mirrors the package's layers. A unit test that starts a
  process (a subprocess, a DataLoader worker, torchrun) fails and says to move it: the tier's speed is
  a promise the guard below keeps, not a hope.
- tests/integration/: the command line end to end, torchrun, README, the examples, the checker on whole
  scripts, kills and resumes.
"""
from __future__ import annotations

import contextlib
import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS_DIR = Path(__file__).resolve().parent      # the data folders the tests share: programs/, check_zoo/, ...
REPO_ROOT = TESTS_DIR.parent
UNIT_DIR = TESTS_DIR / "unit"
# TORCHWISE_TEST_GUARD_ALL=1 applies the unit tier's guard to every test (to find which ones start processes)
_GUARD_ALL = os.environ.get("TORCHWISE_TEST_GUARD_ALL") == "1"


def _warm_process_caches() -> None:
    """Python's platform module runs `uname -p` the first time anyone asks for the processor (mlflow and
    others do) and keeps the answer: asked here once, so that which unit test asks first does not decide
    which one the guard below fails. Importing torch does the same (its CUDA library finder runs `ldconfig -p`
    once): imported here, so that a unit test run alone is not blamed for it."""
    import platform

    import torch  # noqa: F401

    platform.processor()


_warm_process_caches()


def _sigint_as_a_terminal_has_it() -> None:
    """A test run started as a background job of a non-interactive shell (`cmd &` in a script, some CI
    runners) inherits SIGINT ignored, and so does every process it starts: Python then installs no
    KeyboardInterrupt handler, and the Ctrl-C tests would test that shell, not torchwise. Give this
    process (and through it, the processes the tests start) the disposition a user's terminal gives."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_sigint_as_a_terminal_has_it()


class StartedAProcess(AssertionError):
    """A unit test (or a fixture it set up) started a process."""


@contextlib.contextmanager
def no_processes(nodeid: str):
    """Within it, starting a subprocess or a multiprocessing worker raises StartedAProcess naming `nodeid`."""
    import multiprocessing.process

    def refuse(what: str):
        def start(*args, **kwargs):
            raise StartedAProcess(f"{nodeid} started {what}: a unit test runs in this process only; "
                                  "move the test to tests/integration/, or test the same logic in-process")
        return start

    saved = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start
    subprocess.Popen.__init__ = refuse("a subprocess")
    multiprocessing.process.BaseProcess.start = refuse("a worker process")
    try:
        yield
    finally:
        subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start = saved


def is_unit_test(path: Path) -> bool:
    return _GUARD_ALL or UNIT_DIR in Path(str(path)).resolve().parents


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In tests/unit, starting a process fails the test with what to do instead. The guard spans the whole
    protocol, so a module- or session-scoped fixture that a unit test sets up is held to it too."""
    if not is_unit_test(item.path):
        yield
        return
    with no_processes(item.nodeid):
        yield


@pytest.fixture(autouse=True)
def _sigint_handler_is_left_as_found(request):
    """A test that leaves SIGINT ignored or handled breaks every Ctrl-C test after it in the same process, and
    the subprocesses it starts inherit an ignored SIGINT: put it back, and fail the test that changed it."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"{request.node.nodeid} left the SIGINT handler as {after!r} (it was {before!r})")


CLASS_COLORS = {"red": (200, 40, 40), "green": (40, 180, 60), "blue": (50, 60, 210)}


def write_color_images(folder: Path, per_class: int, *, seed: int, size: int = 16) -> None:
    """One folder per class; each image is the class colour plus noise and a random bright square,
    so the classes are easy but not identical images."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, color in CLASS_COLORS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = np.array(color, dtype=np.float32) + rng.normal(0, 25, (size, size, 3))
            x, y = rng.integers(0, size - 4, 2)
            pixels[y:y + 4, x:x + 4] = 255
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(folder / name / f"{name}_{i:03d}.png")


def write_corrupt_files(folder: Path) -> list[Path]:
    """A truncated PNG and an empty .jpg: both must be skipped and listed, never crash training."""
    good = next(folder.glob("*.png")).read_bytes()
    truncated = folder / "broken_truncated.png"
    truncated.write_bytes(good[: len(good) // 3])
    empty = folder / "empty.jpg"
    empty.write_bytes(b"")
    (folder / "notes.txt").write_text("not an image: ignored without complaint")
    return [truncated, empty]


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """root/<red|green|blue>/*.png, 16x16 RGB, 24 per class, plus two corrupt files in red/."""
    root = tmp_path_factory.mktemp("images") / "colors"
    write_color_images(root, 24, seed=0)
    write_corrupt_files(root / "red")
    return root


@pytest.fixture(scope="session")
def trainval_folder(tmp_path_factory) -> Path:
    """root/train/<class>/ and root/val/<class>/ (the user's own split)."""
    root = tmp_path_factory.mktemp("images") / "trainval"
    write_color_images(root / "train", 16, seed=1)
    write_color_images(root / "val", 6, seed=2)
    return root


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="session")
def classification_csv(tmp_path_factory) -> Path:
    """200 rows: two numeric features, a categorical one, an id column, a few missing values;
    the label is a clear function of x1 and the colour."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(200):
        x1, x2 = rng.normal(0, 1), rng.normal(5, 2)
        color = ["red", "green", "blue"][i % 3]
        label = "yes" if x1 + (1.5 if color == "red" else -0.5) > 0 else "no"
        row: list[object] = [f"id{i:04d}", round(x1, 4), round(x2, 4), color, label]
        if i % 25 == 3:
            row[2] = ""            # missing numeric
        if i % 40 == 7:
            row[3] = "NA"          # missing category
        rows.append(row)
    return _write_csv(tmp_path_factory.mktemp("csv") / "customers.csv", ["id", "x1", "x2", "color", "label"], rows)


@pytest.fixture(scope="session")
def regression_csv(tmp_path_factory) -> Path:
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(240):
        area, rooms = rng.uniform(30, 150), int(rng.integers(1, 6))
        city = ["north", "south"][int(rng.integers(0, 2))]
        price = 2.0 * area + 15 * rooms + (40 if city == "north" else 0) + rng.normal(0, 5)
        rows.append([round(area, 2), rooms, city, round(price, 2)])
    return _write_csv(tmp_path_factory.mktemp("csv") / "houses.csv", ["area", "rooms", "city", "price"], rows)


def run_cli(*args: object, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m torchwise ARGS` in a subprocess; stdout/stderr captured as text."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "torchwise", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def image_run(image_folder, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One real `torchwise train` on the colour folder (with its corrupt files), shared by the
    train, eval and report tests: (run directory, finished process)."""
    run_dir = tmp_path_factory.mktemp("runs") / "colors"
    proc = run_cli("train", "--data", image_folder, "--out", run_dir, "--epochs", "3", "--batch-size", "16",
                   "--lr", "0.003", "--seed", "0", "--set", "train.threads=1", "--set", "output.worst_examples=8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir, proc


@pytest.fixture
def one_torch_thread():
    """The checker tests run tiny scripts in this process: several torch threads on a shared 2-core machine
    only add contention."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def run_checked_quietly(path: Path):
    """`torchwise check`'s runner on a script, in this process, with the script's own output dropped."""
    import contextlib
    import io

    from torchwise.script_check.runner import run_script

    with contextlib.redirect_stdout(io.StringIO()):
        return run_script(str(path), [])


# --- the robustness suite's two promises (tests/test_robust_*.py) ---------------------------------

def tree_snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under `root` (and each directory, as an entry): size, mode and a content hash, so
    "a refused command changed nothing on disk" is a plain `==` of two snapshots."""
    import hashlib

    root = Path(root)
    if not root.exists():
        return {}
    snap: dict[str, tuple[int, int, str]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            snap[rel] = (0, 0, "link:" + os.readlink(path))
        elif path.is_dir():
            snap[rel] = (0, path.stat().st_mode, "dir")
        else:
            data = path.read_bytes()
            snap[rel] = (len(data), path.stat().st_mode, hashlib.sha256(data).hexdigest())
    return snap


def assert_clear_cli_error(proc: subprocess.CompletedProcess, *must_say: str, code: int = 2) -> str:
    """A refused CLI command: the exit status, torchwise's own one-paragraph error with a fix, every
    phrase in `must_say` (the values), and no Python traceback. Returns the error text."""
    text = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in text, f"a raw traceback instead of an error:\n{text[-3000:]}"
    assert proc.returncode == code, f"exit status {proc.returncode}, expected {code}:\n{text[-3000:]}"
    assert ": error: " in proc.stderr and "fix:" in proc.stderr, f"no error with a fix:\n{text[-3000:]}"
    for phrase in must_say:
        assert phrase in text, f"the error does not say {phrase!r}:\n{text[-3000:]}"
    return proc.stderr


def assert_clear_api_error(excinfo, *must_say: str) -> str:
    """A refused Python call: a TorchwiseError (what, values, fix) saying every phrase in `must_say`."""
    from torchwise.errors import TorchwiseError

    exc = excinfo.value
    assert isinstance(exc, TorchwiseError), f"{type(exc).__name__} from inside instead of a TorchwiseError: {exc}"
    text = str(exc)
    assert exc.fix, f"the error gives no fix:\n{text}"
    for phrase in must_say:
        assert phrase in text, f"the error does not say {phrase!r}:\n{text}"
    return text
