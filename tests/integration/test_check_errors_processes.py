"""Readable errors from real processes: DataLoader workers that crash or are killed, spawn without a main guard,
a taken MASTER_PORT. The in-process translations are tests/unit/diagnose/test_check_errors.py."""
from __future__ import annotations

import pytest
import torch

from torchwise.diagnose.error_translation import translate

from conftest import TESTS_DIR


def error_of(fn) -> BaseException:
    with pytest.raises(BaseException) as info:
        fn()
    return info.value


def test_collate_of_samples_with_different_sizes_also_from_a_worker():
    from torch.utils.data import DataLoader

    samples = [(torch.zeros(3, 32, 32), 0), (torch.zeros(3, 28, 28), 1)]
    text = translate(error_of(lambda: next(iter(DataLoader(samples, batch_size=2)))))
    assert "[3, 32, 32] (sample 0 of the batch) and [3, 28, 28] (sample 1)" in text
    assert "T.Resize((224, 224))" in text and "collate_fn=collate" in text
    # in a worker the same mistake reads "Caught RuntimeError in DataLoader worker process 0 ... Trying to resize
    # storage that is not resizable" (the batch is stacked into shared memory sized from the first sample)
    exc = error_of(lambda: next(iter(DataLoader(samples, batch_size=2, num_workers=1))))
    assert "Trying to resize storage that is not resizable" in str(exc)
    text = translate(exc)
    assert "tensors of different shapes" in text and "T.Resize((224, 224))" in text and "num_workers=0" in text
    text = translate(error_of(lambda: torch.stack([torch.zeros(2), torch.zeros(3)])))   # not from a DataLoader
    assert "torch.stack got tensors of different shapes: [2] (entry 0) and [3] (entry 1)" in text


def test_spawn_workers_without_main_guard():
    import os
    import subprocess
    import sys

    script = TESTS_DIR / "programs" / "crash_spawn_no_main_guard.py"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    # the worker (the script re-imported as __mp_main__) gets the bootstrapping error ...
    child = proc.stdout.split("[__mp_main__] ", 1)[1].split("[__main__] ")[0]
    assert child.startswith("RuntimeError: An attempt has been made to start a new process before the")
    line = script.read_text().splitlines().index("    for (x,) in loader:") + 1   # where the workers start
    assert f"{script}, line {line}" in child and 'if __name__ == "__main__":' in child and "main()" in child
    # ... and the script itself gets "DataLoader worker exited unexpectedly"
    parent = proc.stdout.split("[__main__] ", 1)[1]
    assert parent.startswith("RuntimeError: DataLoader worker (pid(s) ")
    assert "exit code 1; start method spawn, 1 worker(s)" in parent and 'if __name__ == "__main__":' in parent


class _WorkerKillsItself(torch.utils.data.Dataset):
    def __init__(self, signum):
        self.signum = signum

    def __len__(self):
        return 4

    def __getitem__(self, i):
        import os
        os.kill(os.getpid(), self.signum)


def test_dataloader_worker_killed_by_the_oom_killer_or_a_bus_error():
    import multiprocessing
    import signal

    from torch.utils.data import DataLoader

    method = multiprocessing.get_start_method()
    exc = error_of(lambda: list(DataLoader(_WorkerKillsItself(signal.SIGKILL), batch_size=2, num_workers=1)))
    assert "exited unexpectedly" in str(exc) and "killed by signal: Killed" in str(exc.__cause__)
    text = translate(exc)
    assert f"killed by signal Killed; start method {method}, 1 worker(s)" in text
    assert "out-of-memory killer" in text and "num_workers=2" in text
    exc = error_of(lambda: list(DataLoader(_WorkerKillsItself(signal.SIGBUS), batch_size=2, num_workers=1)))
    text = translate(exc)
    assert "killed by signal Bus error" in text and "/dev/shm" in text and "--shm-size" in text


def test_master_port_already_in_use():
    import socket
    import subprocess
    import sys

    # In a child process: a failed init_process_group leaves this process's group counter advanced,
    # so a later two-process group here (the DDP zoo scripts) would name its store keys differently
    # from its peer's and never meet it.
    program = """
import os, socket, sys
import torch.distributed as dist
from torchwise.diagnose.error_translation import translate
with socket.socket() as taken:   # another run holds the port
    taken.bind(("", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=0, world_size=1)
    except Exception as exc:
        assert not dist.is_initialized()
        print(port)
        print(translate(exc))
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    port_line, text = proc.stdout.split("\n", 1)
    port = int(port_line)
    assert f"could not listen on port {port} (MASTER_PORT={port})" in text
    assert f"--master-port={port + 1}" in text and "--standalone" in text and "localhost:0" in text
    with socket.socket() as taken, socket.socket() as other:   # the same errno outside torch.distributed
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        exc = error_of(lambda: other.bind(taken.getsockname()))
    text = translate(exc)
    assert "another process already uses it" in text and "MASTER_PORT" not in text
