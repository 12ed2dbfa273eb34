"""The files the data layer and the config write outlive the process, integration half: a process killed or
failing mid-write leaves the previous file whole. The in-process half is tests/unit/data/test_atomic_writes.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchwise import config as cfg
from torchwise.data import stats, tasks
from conftest import REPO_ROOT


ROOT = REPO_ROOT
# Far longer than any of these writes takes; only a hang reaches it.
TIMEOUT_S = 180

resource = pytest.importorskip("resource")


def run_limited(code: str, limit: int) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python whose writes stop at `limit` bytes per file (set after the imports it
    lists first, so only the writer meets it). Exit 3 with the error message when it raises TorchwiseError."""
    script = textwrap.dedent('''
        import resource, signal, sys
        from torchwise.errors import TorchwiseError
        {imports}
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
        {body}
        except TorchwiseError as exc:
            print(exc)
            sys.exit(3)
    ''')
    imports, _, body = textwrap.dedent(code).strip().partition("\n---\n")
    script = script.format(imports=imports, limit=limit, body=textwrap.indent(body, "    "))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the limited write did not finish in {TIMEOUT_S} s:\n{script}")


def assert_refused(result: subprocess.CompletedProcess, path: Path) -> None:
    assert result.returncode == 3, (f"the write past the file size limit was not refused with a TorchwiseError "
                                    f"(exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    assert str(path) in result.stdout and "file size limit" in result.stdout, result.stdout


def no_temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_config_save_failing_mid_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "run" / "config.yaml"
    cfg.resolve().save(path)
    old = path.read_bytes()
    result = run_limited(f"""
        from torchwise import config as cfg
        config = cfg.resolve(flags={{"lr": "0.5"}})
        ---
        config.save({str(path)!r})
    """, limit=len(old) // 2)
    assert_refused(result, path)
    assert path.read_bytes() == old
    assert no_temporaries(path.parent) == []


# ----------------------------------------------------------------------------- split.json


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "table.csv"
    path.write_text("x,y\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(40)))
    return path


def test_split_json_failing_mid_write_keeps_the_old_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / tasks.SPLIT_FILE
    old = b'{"kind": "tabular", "root": "an earlier split", "train_rows": [0], "val_rows": [1]}'
    path.write_bytes(old)
    data = _csv(tmp_path)
    result = run_limited(f"""
        import torch
        from torchwise import config as cfg
        from torchwise.data import tasks
        config = cfg.from_dict({{"data": {{"path": {str(data)!r}, "target": "y"}}}})
        ---
        tasks.prepare_task(config, {str(run)!r}, log=lambda _line: None)
    """, limit=len(old) + 10)
    assert_refused(result, path)
    assert path.read_bytes() == old
    assert no_temporaries(run) == []


def test_stats_cache_failing_mid_write_keeps_the_old_file(tmp_path):
    path = tmp_path / stats.STATS_FILE
    old = json.dumps({"key": "old", "mean": [0.1], "std": [0.2], "split": "train"}, indent=2).encode()
    path.write_bytes(old)
    result = run_limited(f"""
        from torchwise.data import stats
        ---
        stats.cached_mean_std({str(tmp_path)!r}, "a-new-key", lambda: ([0.25, 0.5, 0.75], [0.125, 0.25, 0.375]))
    """, limit=len(old) // 2)
    assert_refused(result, path)
    assert path.read_bytes() == old
    assert no_temporaries(tmp_path) == []
    # the old cache is still the one read back (its key), and a new key still computes
    assert stats.cached_mean_std(tmp_path, "old", lambda: pytest.fail("recomputed")) == ([0.1], [0.2], True)


def test_digits_failing_mid_write_keep_the_old_files(tmp_path):
    root = tmp_path / "digits"
    (root / "0").mkdir(parents=True)
    first = root / "0" / "digit_0000.png"
    first.write_bytes(b"an earlier file")
    result = run_limited(f"""
        from torchwise.data.digits import write_digits
        import sklearn.datasets, PIL.PngImagePlugin
        ---
        write_digits({str(root)!r})
    """, limit=40)
    assert_refused(result, first)
    assert first.read_bytes() == b"an earlier file"
    assert no_temporaries(root / "0") == []
