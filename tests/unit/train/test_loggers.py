"""The Trainer's loggers for real: a tiny model trained with the real Trainer, and what each logger wrote
read back with its own tool's reader (MLflow's client, W&B's protobuf records, csv)."""
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from torchwise import Trainer
from torchwise.errors import ConfigError, TorchwiseError
from testkit.logger_runs import csv_numbers, csv_rows, data, trainer


@pytest.fixture
def mlflow_env(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    # unset, as for a user: the logger opts in to MLflow's file store itself (setenv first, so it is undone)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "false")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")


def mlflow_client(run_dir):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=(run_dir.resolve() / "mlruns").as_uri())


def mlflow_run_of(run_dir):
    import json

    return json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]


def assert_mlflow_equals_csv(client, run_id, rows):
    for key in csv_numbers(rows[0]):
        history = {m.step: m.value for m in client.get_metric_history(run_id, key)}
        for row in rows:
            if key in csv_numbers(row):
                assert history[int(row["step"])] == pytest.approx(float(row[key]), rel=1e-5), (key, row["step"])


def test_mlflow_file_store_holds_the_csv_rows_params_and_status(tmp_path, mlflow_env):
    run_dir = tmp_path / "run"
    trainer(run_dir, ["csv", "mlflow"], metadata={"owner": "tests"}).fit()
    rows = csv_rows(run_dir)
    assert [int(r["step"]) for r in rows] == [4, 8]
    client, run_id = mlflow_client(run_dir), mlflow_run_of(run_dir)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "torchwise"
    assert run.data.params["loop.batch_size"] == "16" and run.data.params["logging.metadata.owner"] == "tests"
    assert_mlflow_equals_csv(client, run_id, rows)
    assert not (run_dir / "tb").exists()  # tensorboard was not chosen


def test_a_resumed_run_continues_the_same_mlflow_run(tmp_path, mlflow_env):
    run_dir = tmp_path / "run"
    trainer(run_dir, ["csv", "mlflow"], epochs=1).fit()
    first = mlflow_run_of(run_dir)
    result = trainer(run_dir, ["csv", "mlflow"], epochs=2, resume=True).fit()
    assert result.resumed_from is not None
    assert mlflow_run_of(run_dir) == first
    client = mlflow_client(run_dir)
    assert len(client.search_runs([client.get_run(first).info.experiment_id])) == 1
    assert client.get_run(first).info.status == "FINISHED"
    rows = csv_rows(run_dir)
    assert [int(r["step"]) for r in rows] == [4, 8]
    assert_mlflow_equals_csv(client, first, rows)


class Recorder:
    def __init__(self):
        self.run, self.rows, self.train, self.status = None, [], [], None

    def start(self, run):
        self.run = run

    def log_metrics(self, row, step):
        self.rows.append((step, row))

    def log_train(self, values, step):
        self.train.append(step)

    def finish(self, status):
        self.status = status


def test_a_logger_of_your_own_receives_every_row(tmp_path):
    recorder = Recorder()
    result = trainer(tmp_path / "run", ["csv", recorder], log_every=2).fit()
    assert recorder.run.run_dir == tmp_path / "run" and recorder.run.config["loop"]["batch_size"] == 16
    assert not recorder.run.resumed and recorder.run.columns[:2] == ["epoch", "step"]
    assert [step for step, _ in recorder.rows] == [r["step"] for r in result.history] == [4, 8]
    assert [row for _, row in recorder.rows] == result.history
    assert recorder.train == [2, 4, 6, 8] and recorder.status == "finished"
    assert len(csv_rows(tmp_path / "run")) == 2


class Broken:
    name = "broken-tracker"

    def __init__(self):
        self.finished = None

    def log_metrics(self, row, step):
        raise ConnectionError("tracker unreachable")

    def finish(self, status):
        self.finished = status


def test_a_failing_logger_is_named_and_loses_neither_rows_nor_the_run(tmp_path, capsys):
    broken, recorder = Broken(), Recorder()
    result = trainer(tmp_path / "run", ["csv", broken, recorder]).fit()
    err = capsys.readouterr().err
    assert "'broken-tracker' failed at step 4 (ConnectionError: tracker unreachable)" in err
    assert "'broken-tracker' failed 2 time(s)" in err
    assert [int(r["step"]) for r in csv_rows(tmp_path / "run")] == [4, 8] == [s for s, _ in recorder.rows]
    assert result.steps == 8 and broken.finished == "finished"


class Vanishing(TensorDataset):
    """Data that fails once `gone` is set: a run that breaks in its second epoch."""
    gone = False

    def __getitem__(self, index):
        if self.gone:
            raise OSError("the data disk went away")
        return super().__getitem__(index)


def test_a_failed_run_ends_its_loggers_as_failed(tmp_path):
    train_data = Vanishing(*data().tensors)

    class BreaksTheData(Recorder):
        def log_metrics(self, row, step):
            super().log_metrics(row, step)
            train_data.gone = True

    recorder = BreaksTheData()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(Exception, match="the data disk went away"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), train_data=train_data, val_data=data(seed=1),
                epochs=2, batch_size=16, out_dir=tmp_path / "run", loggers=[recorder], progress=False,
                checks=False, num_workers=0).fit()
    assert [step for step, _ in recorder.rows] == [4] and recorder.status == "failed"


def test_a_logger_failing_to_start_stops_the_run_before_it_trains(tmp_path):
    class NoStart(Recorder):
        def start(self, run):
            raise PermissionError("no access")

    recorder = Recorder()
    with pytest.raises(TorchwiseError, match="'NoStart' failed to start") as info:
        trainer(tmp_path / "run", [recorder, NoStart()]).fit()
    assert "PermissionError: no access" in str(info.value)
    assert recorder.status == "failed" and recorder.rows == []


def test_an_unknown_logger_name_says_which_was_meant_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="Unknown logger 'mlfow'") as info:
        trainer(tmp_path / "run", ["csv", "mlfow"]).fit()
    assert "did you mean: mlflow" in str(info.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="no log_metrics"):
        trainer(tmp_path / "run", [object()]).fit()
    with pytest.raises(ConfigError, match="tensorboard=False"):
        trainer(tmp_path / "run", ["tensorboard"], tensorboard=False).fit()
    assert not (tmp_path / "run").exists()


def test_a_missing_package_says_which_to_install_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed: its import fails
    with pytest.raises(TorchwiseError, match="needs the 'mlflow' package") as info:
        trainer(tmp_path / "run", ["csv", "mlflow"]).fit()
    assert "pip install mlflow-skinny" in str(info.value)
    assert not (tmp_path / "run").exists()
