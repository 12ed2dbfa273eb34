"""README.md is a contract: its Python example runs as written and its set-up commands are real."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_example_runs_as_written(tmp_path):
    block = README.split("<!-- readme-example")[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert 15 <= len(block.strip().splitlines()) <= 25
    script = tmp_path / "example.py"
    script.write_text(block)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    best = float(re.search(r"best val_acc ([0-9.]+)", proc.stdout).group(1))
    assert best > 0.9
    assert (tmp_path / "runs" / "digits" / "final" / "model.safetensors").is_file()
    # the comment's promise: with resume=True the finished run is picked up from its last checkpoint
    script.write_text(block.replace('out_dir="runs/digits",', 'out_dir="runs/digits", resume=True,'))
    resumed = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    # and without it, the old run is not silently overwritten
    script.write_text(block)
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "already holds checkpoints" in again.stderr
