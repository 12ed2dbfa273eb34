"""`torchwise tune` / `torchwise.tune`: real searches on the digits demo data.

Every trial is a real training run (smallcnn or mlp on the 8x8 digits, 1-2 epochs). The main test
kills a running search with SIGKILL and resumes it from its SQLite file.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from conftest import run_cli


optuna = pytest.importorskip("optuna")

SPACE = {"train.lr": {"type": "loguniform", "low": 1.0e-5, "high": 3.0e-2},
         "train.batch_size": {"type": "int", "low": 32, "high": 128, "step": 32}}
GOOD = {"train.lr": 0.005, "train.batch_size": 64}
GOOD2 = {"train.lr": 0.01, "train.batch_size": 32}
BAD = {"train.lr": 1.0e-5, "train.batch_size": 64}   # barely learns in an epoch: the pruner must stop it


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    from torchwise.data.digits import write_digits

    return write_digits(tmp_path_factory.mktemp("tune-data") / "digits")


def _run_config(digits: Path, folder: Path, **train) -> Path:
    config = {"data": {"path": str(digits), "hflip": False, "crop_scale": 0.8, "center_crop": 1.0},
              "model": {"name": "smallcnn"},
              "train": {"epochs": 2, "batch_size": 64, "lr": 0.005, "threads": 1, "scheduler": "onecycle", **train}}
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _load(study_dir: Path):
    return optuna.load_study(study_name="torchwise", storage=f"sqlite:///{study_dir / 'study.db'}")


def _wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the search ended before {what}: rc={proc.returncode}\n{out}")
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def _pid_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie (killed, not yet reaped by its init) counts as gone
        stat = Path(f"/proc/{pid}/stat")
        if stat.is_file() and stat.read_text().split(")")[-1].split()[0] == "Z":
            return True
        time.sleep(0.2)
    return False


def test_search_killed_resumed_and_best_config_trains(digits, tmp_path):
    from optuna.trial import TrialState

    run_yaml = _run_config(digits, tmp_path)
    space_yaml = tmp_path / "space.yaml"
    space_yaml.write_text(yaml.safe_dump(SPACE))
    study_dir = tmp_path / "study"
    # The first search runs the Python API in a real subprocess, which the test kills with SIGKILL.
    script = textwrap.dedent(f"""
        import torchwise.tune as tw
        tw.tune({str(run_yaml)!r}, {str(space_yaml)!r}, trials=5, out={str(study_dir)!r}, seed=0,
                enqueue=[{GOOD!r}, {GOOD2!r}, {BAD!r}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        def three_finished_one_running():
            if not (study_dir / "study.db").exists():
                return None
            try:
                trials = _load(study_dir).get_trials()
            except Exception:  # the study is being created
                return None
            finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
            running = [t for t in trials if t.state == TrialState.RUNNING and "worker_pid" in t.user_attrs]
            return (finished, running[0]) if len(finished) >= 3 and running else None

        _wait_for(three_finished_one_running, proc, 120, "three finished trials and a fourth running")
        time.sleep(0.5)  # let the fourth trial get into its training
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    trials = _load(study_dir).get_trials()
    left_running = [t for t in trials if t.state == TrialState.RUNNING]
    assert len(left_running) == 1, trials  # the killed trial is left RUNNING in the database
    running = left_running[0]
    assert _pid_gone(int(running.user_attrs["worker_pid"])), "the worker kept training after its search was killed"
    before = {t.number: (t.state, t.value, t.params) for t in trials
              if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
    # The median pruner waits for two complete trials, then stops the bad one at its first evaluation.
    assert [(before[n][0], before[n][2]) for n in range(3)] == [
        (TrialState.COMPLETE, GOOD), (TrialState.COMPLETE, GOOD2), (TrialState.PRUNED, BAD)], before

    # Resume through the CLI from the same SQLite file: same command, the search goes on to 5.
    resumed = run_cli("tune", "--config", run_yaml, "--space", space_yaml, "--trials", 5, "--out", study_dir,
                      "--apply", tmp_path / "tuned.yaml", timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"trial {running.number} was interrupted" in resumed.stdout
    study = _load(study_dir)
    trials = study.get_trials()
    by_number = {t.number: t for t in trials}
    for number, (state, value, params) in before.items():  # finished trials are kept, not rerun
        assert (by_number[number].state, by_number[number].value, by_number[number].params) == (state, value, params)
    killed = by_number[running.number]
    assert killed.state == TrialState.FAIL and killed.user_attrs["interrupted"] is True
    assert "interrupted" in killed.user_attrs["fail_reason"]
    retried = [t for t in trials if t.user_attrs.get("retry_of") == running.number]
    assert len(retried) == 1 and retried[0].params == killed.params and retried[0].state != TrialState.FAIL
    real = [t for t in trials if not t.user_attrs.get("interrupted")]
    assert len(real) == 5 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in real)
    assert len({t.user_attrs["run_dir"] for t in real}) == 5
    for t in real:
        assert (Path(t.user_attrs["run_dir"]) / "metrics.csv").is_file()

    # Results: table (printed and CSV), best.yaml and its copy, plots, summary.
    rows = (study_dir / "trials.csv").read_text().splitlines()
    assert len(rows) == 1 + len(trials)
    assert rows[0].split(",")[:5] == ["trial", "state", "value", *yaml.safe_load(space_yaml.read_text())]
    assert "interrupted" in (study_dir / "trials.csv").read_text()
    for name in ("optimization_history.png", "param_importances.png", "intermediate_values.png"):
        assert (study_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    summary = json.loads((study_dir / "summary.json").read_text())
    assert summary["best"]["trial"] == study.best_trial.number and summary["best"]["value"] == study.best_value
    best = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert best["train"]["lr"] == pytest.approx(study.best_params["train.lr"])
    assert best["train"]["batch_size"] == study.best_params["train.batch_size"]
    assert best["output"]["dir"] == str(study_dir / "best-run") and best["train"]["resume"] is False
    assert (tmp_path / "tuned.yaml").read_text() == (study_dir / "best.yaml").read_text()

    # A finished study run again trains nothing: it only writes the results again.
    again = run_cli("tune", "--config", run_yaml, "--space", space_yaml, "--trials", 5, "--out", study_dir)
    assert again.returncode == 0 and "already holds 5 trials" in again.stdout, again.stdout + again.stderr
    assert "start" not in again.stdout and len(_load(study_dir).get_trials()) == len(trials)

    # Resuming with another space would mix incomparable trials: refused before any trial runs.
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"train.lr": {"type": "loguniform", "low": 1.0e-4, "high": 1.0e-1}}))
    refused = run_cli("tune", "--config", run_yaml, "--space", other, "--trials", 6, "--out", study_dir)
    assert refused.returncode == 2 and "other settings" in refused.stderr and "space" in refused.stderr
    assert len(_load(study_dir).get_trials()) == len(trials)

    # The best config is a ready-to-run `train` config.
    trained = run_cli("train", "--config", study_dir / "best.yaml", "--set", "output.report=false", "--quiet")
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert (study_dir / "best-run" / "final" / "model.safetensors").is_file()
    assert json.loads((study_dir / "best-run" / "eval.json").read_text())["accuracy"] > 0.5


def test_parallel_workers_failed_trial_recorded_and_search_goes_on(digits, tmp_path):
    from optuna.trial import TrialState

    import torchwise.tune

    run_yaml = _run_config(digits, tmp_path, epochs=1)
    space = {"model.name": {"type": "categorical", "choices": ["mlp", "no_such_module:net"]},
             "train.lr": {"type": "loguniform", "low": 1.0e-3, "high": 1.0e-2}}
    lines: list[str] = []
    # All three trials queued: which of them fails must not depend on the sampler or on timing.
    queue = [{"model.name": "no_such_module:net", "train.lr": 0.003},
             {"model.name": "mlp", "train.lr": 0.003}, {"model.name": "mlp", "train.lr": 0.008}]
    result = torchwise.tune(run_yaml, space, trials=3, out=tmp_path / "study", parallel=2, pruner="halving",
                            metric="val_acc", enqueue=queue, log=lines.append)
    output = "\n".join(lines)
    trials = _load(tmp_path / "study").get_trials()
    assert len(trials) == 3, output                      # K workers, one SQLite file: exactly N trials
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and failed[0].params["model.name"] == "no_such_module:net", output
    assert "no_such_module" in failed[0].user_attrs["fail_reason"]
    assert (Path(failed[0].user_attrs["run_dir"]) / "error.txt").is_file()
    assert len({t.user_attrs["worker_pid"] for t in trials}) == 2, output   # two trials ran at once
    assert "[w0]" in output and "[w1]" in output
    assert result.direction == "maximize" and result.best_params["model.name"] == "mlp"
    assert 0.0 < result.best_value <= 1.0 and result.counts.get("failed") == 1
    assert "failed" in (tmp_path / "study" / "trials.csv").read_text()


def test_space_errors_name_the_key_and_the_fix(digits, tmp_path):
    run_yaml = _run_config(digits, tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("train.lrr: {type: loguniform, low: 1e-4, high: 1e-1}\n")
    proc = run_cli("tune", "--config", run_yaml, "--space", space, "--trials", 2, "--out", tmp_path / "s")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "train.lrr" in proc.stderr and "did you mean: train.lr" in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing created for a search that cannot run

    from torchwise.errors import ConfigError
    from torchwise.tune.space import load_space

    cases = {
        "train.batch_size: {type: uniform, low: 16, high: 64}": "type: int",
        "train.lr: {type: loguniform, low: 0, high: 0.1}": "low > 0",
        "train.scheduler: [cosine, cosin]": "did you mean: cosine",
        "train.lr: {type: logunifrom, low: 1.0e-4, high: 0.1}": "did you mean: loguniform",
        "data.val_fraction: {type: uniform, low: 0.1, high: 1.0}": "data.val_fraction",
        "output.dir: [a, b]": "cannot be searched",
        "train: {lr: {type: uniform, low: 0.1, high: 0.01}}": "low must be below its high",
    }
    for text, expected in cases.items():
        with pytest.raises(ConfigError) as info:
            load_space(yaml.safe_load(text))
        assert expected in str(info.value), (text, str(info.value))
    parsed = load_space(yaml.safe_load("train.lr: {type: loguniform, low: 1e-4, high: 1e-1}\n"
                                       "train: {batch_size: [32, 64]}"))
    assert [(p.key, p.kind) for p in parsed] == [("train.lr", "loguniform"), ("train.batch_size", "categorical")]
    assert parsed[0].low == pytest.approx(1e-4)   # `1e-4` is text to YAML; read as the number meant


def test_import_stays_light():
    code = ("import sys, torchwise, torchwise.tune, torchwise.cli.tune_command; "
            "print(sorted(m for m in ('optuna', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
