"""MLflow: one MLflow run per Trainer run, in <run>/mlruns (a local file store) unless MLFLOW_TRACKING_URI
says where. Params are the resolved config flattened (loop.batch_size, ...), metrics are logged per step,
and the run ends with the Trainer's status. A resumed run continues the MLflow run whose id is kept in
<run>/mlflow_run.json."""
from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any

from torchwise import files
from torchwise.errors import TorchwiseError
from torchwise.train.loggers.external import import_package, store_run, stored_run
from torchwise.train.loggers.protocol import RunInfo, numbers_of

INSTALL = "pip install mlflow-skinny, or pip install mlflow"
RUN_FILE = "mlflow_run.json"
MAX_PARAM_LENGTH = 6000  # MLflow refuses longer param values
PARAMS_PER_BATCH = 100   # and more params in one call
STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


class MlflowLogger:
    """tracking_uri and experiment default to MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME, then to
    file:<run>/mlruns and "torchwise"."""

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None) -> None:
        self.tracking_uri, self.experiment = tracking_uri, experiment
        self.client: Any = None
        self.run_id: str | None = None

    def start(self, run: RunInfo) -> None:
        import_package("mlflow", "mlflow", INSTALL)
        from mlflow.tracking import MlflowClient

        uri = self.uri_for(run)
        if uri.startswith("file:") or "://" not in uri:
            # MLflow 3 asks for an opt-in to its file store; it is the store mlflow-skinny can write alone
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = MlflowClient(tracking_uri=uri)
        name = self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "torchwise"
        found = client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found is not None else client.create_experiment(name)
        existing = self.resumed_run(run, uri) if run.resumed else None
        if existing is not None:
            self.run_id = existing.info.run_id
            client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {"torchwise.run_dir": str(run.run_dir)} if run.run_dir is not None else {}
            self.run_id = client.create_run(experiment_id, run_name=run.run_name, tags=tags).info.run_id
            store_run(run.run_dir, RUN_FILE, {"run_id": self.run_id, "tracking_uri": uri, "experiment": name})
        self.log_params(flat_params(run.config), {} if existing is None else dict(existing.data.params))

    def uri_for(self, run: RunInfo) -> str:
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            return uri
        if run.run_dir is None:
            raise TorchwiseError("The 'mlflow' logger has no place to write: the Trainer has no out_dir and "
                                 "MLFLOW_TRACKING_URI is not set.", values={"out_dir": None},
                                 fix="Pass out_dir=... (the runs go to <out_dir>/mlruns), or set "
                                     "MLFLOW_TRACKING_URI, or drop 'mlflow' from loggers.")
        files.confined(run.run_dir / "mlruns", run.run_dir)  # MLflow's own writes stay in the run folder
        return (run.run_dir.resolve() / "mlruns").as_uri()

    def resumed_run(self, run: RunInfo, uri: str) -> Any:
        """The MLflow run this run folder kept, when the store still has it."""
        from mlflow.exceptions import MlflowException

        run_id = stored_run(run.run_dir, RUN_FILE).get("run_id")
        if not isinstance(run_id, str):
            return None
        try:
            return self.client.get_run(run_id)
        except MlflowException:
            print(f"torchwise: the MLflow run {run_id} kept in {RUN_FILE} is not in {uri}; the resumed run "
                  "logs to a new MLflow run", file=sys.stderr)
            return None

    def log_params(self, params: dict[str, str], existing: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        # MLflow params cannot change: a resumed run adds only the new ones and names the changed ones
        changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)
        new = [Param(k, v) for k, v in params.items() if k not in existing]
        for i in range(0, len(new), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=new[i:i + PARAMS_PER_BATCH], synchronous=True)
        if changed:
            self.client.log_batch(self.run_id, tags=[RunTag("torchwise.changed_on_resume", ", ".join(changed))],
                                  synchronous=True)

    def log_metrics(self, row: dict[str, Any], step: int) -> None:
        self.log_numbers(numbers_of(row), step)

    def log_train(self, values: dict[str, Any], step: int) -> None:
        self.log_numbers({f"train/{k}": v for k, v in numbers_of(values).items()}, step)

    def log_numbers(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        if self.run_id is None or not values:
            return
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(param_key(k), v, now, step) for k, v in values.items()],
                              synchronous=True)

    def finish(self, status: str) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))
            self.run_id = None


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"loop": {"batch_size": 16}} -> {"loop.batch_size": "16"}; lists as JSON; values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{param_key(str(key))}"
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[name] = text if len(text) <= MAX_PARAM_LENGTH else text[:MAX_PARAM_LENGTH - 3] + "..."
    return out


def param_key(key: str) -> str:
    """A key MLflow takes (letters, digits, _ - . / space); others (from metadata, say) become _."""
    return re.sub(r"[^\w.\- /]", "_", key) or "_"
