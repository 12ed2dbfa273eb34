"""Ctrl-C in a plain Python script that calls Trainer.fit() and catches nothing: it ends as the CLI does
(where it stopped, the checkpoint, how to resume) and without a traceback. The signal comes from outside,
as a terminal sends it, while the loop runs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys, time
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    import torchwise

    torchwise.seed_everything(0)
    x = torch.randn(960, 8)
    y = (x.sum(1) > 0).long()
    trainer = torchwise.Trainer(nn.Linear(8, 2), lambda p: torch.optim.SGD(p, lr=0.1),
                                train_data=TensorDataset(x, y), batch_size=16, max_epochs=2, out_dir="run",
                                progress=False, tensorboard=False)

    def pace(step, **_):
        if step == 3:
            print("training", flush=True)  # the test sends SIGINT once it reads this
        if step >= 3:
            time.sleep(0.1)  # 120 steps: the loop is still running when the signal lands
        waited = 0
        while sys.argv[1] == "twice" and trainer.interrupts.guard.pending and waited < 600:
            time.sleep(0.05)  # a long step: the second Ctrl-C comes before the loop can save
            waited += 1

    trainer.on("step_end", pace)
    trainer.fit()
    print("after fit", flush=True)
""")


def interrupt(tmp_path, times: int) -> tuple[int, str, str]:
    """Run the script, send it SIGINT `times` times while it trains (the second once it has said it is
    stopping); (exit status, stdout, stderr)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, "train.py", "twice" if times == 2 else "once"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        first = proc.stdout.readline()
        assert first == "training\n", f"the script did not start training: {first!r}\n{proc.stderr.read()}"
        proc.send_signal(signal.SIGINT)
        said = ""
        while times == 2 and "interrupt received" not in said:
            said = proc.stderr.readline()
            assert said, "the script ended before it said it received the interrupt"
        if times == 2:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def test_ctrl_c_in_a_script_ends_with_the_resume_line_and_no_traceback(tmp_path):
    returncode, out, err = interrupt(tmp_path, 1)
    assert returncode != 0 and "after fit" not in out, (returncode, out, err)  # Ctrl-C stops the script
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, f"Ctrl-C ended in a traceback:\n{err}"
    lines = err.strip().splitlines()
    assert lines[-2].startswith("torchwise: interrupted at step ") and "checkpoint saved: run/checkpoints/step-" \
        in lines[-2], err
    assert lines[-1] == ("torchwise: to resume: Trainer(..., out_dir='run', resume=True).fit() with the same "
                         "arguments continues exactly where it stopped"), err
    checkpoint = lines[-2].split("checkpoint saved: ")[1]
    assert (tmp_path / checkpoint / "COMPLETE").is_file(), err


def test_a_second_ctrl_c_in_a_script_stops_at_once_without_a_traceback(tmp_path):
    returncode, out, err = interrupt(tmp_path, 2)
    assert returncode != 0 and "after fit" not in out, (returncode, out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, f"Ctrl-C ended in a traceback:\n{err}"
    assert "second interrupt: stopping at once" in err, err
    assert "before a checkpoint of it could be written" in err, err
