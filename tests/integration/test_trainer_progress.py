"""The Trainer's progress output as a user sees it, in a real process: a bar on a terminal, one clean line per
epoch otherwise."""
import os
import subprocess
import sys
import textwrap


def test_progress_prints_one_clean_line_per_epoch_when_not_a_tty(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        import torchwise
        x = torch.randn(64, 4); y = (x.sum(1) > 0).long()
        torchwise.Trainer(nn.Linear(4, 2), train_data=TensorDataset(x, y), val_data=TensorDataset(x, y),
                          max_epochs=3, batch_size=16).fit()
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    epoch_lines = [line for line in proc.stderr.splitlines() if line.startswith("epoch ")]
    assert len(epoch_lines) == 3 and "\r" not in proc.stderr
    assert all("train_loss" in line and "val_acc" in line and " lr " in line for line in epoch_lines)


def test_progress_bar_with_loss_and_lr_on_a_terminal(tmp_path):
    import pty

    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import TensorDataset
        import torchwise
        x = torch.randn(64, 4); y = (x.sum(1) > 0).long()
        torchwise.Trainer(nn.Linear(4, 2), train_data=TensorDataset(x, y), max_epochs=3, batch_size=16).fit()
    """))
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the pseudo-terminal, 100 x 24 like a real one
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        os.execv(sys.executable, [sys.executable, str(script)])
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "\r" in text and "12/12" in text and "loss=" in text and "lr=" in text
