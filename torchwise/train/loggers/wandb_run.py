"""Weights & Biases: offline unless WANDB_MODE says otherwise, so nothing leaves the machine until you
`wandb sync <run>/wandb/offline-run-*`. The files go to <run>/wandb, the config is the resolved Trainer
config, each row is logged at its step, and a resumed run continues the W&B run whose id is kept in
<run>/wandb_run.json (resume="allow")."""
from __future__ import annotations

import os
from typing import Any

from torchwise import files
from torchwise.train.loggers.external import import_package, store_run, stored_run
from torchwise.train.loggers.protocol import RunInfo, numbers_of

INSTALL = "pip install wandb"
RUN_FILE = "wandb_run.json"
EXIT_CODE = {"finished": 0, "failed": 1, "killed": 255}


class WandbLogger:
    """project defaults to WANDB_PROJECT, then "torchwise"; mode to WANDB_MODE, then "offline"."""

    name = "wandb"

    def __init__(self, project: str | None = None, mode: str | None = None) -> None:
        self.project, self.mode = project, mode
        self.run: Any = None

    def start(self, run: RunInfo) -> None:
        wandb = import_package("wandb", "wandb", INSTALL)
        from wandb.sdk.lib.runid import generate_id

        run_id = stored_run(run.run_dir, RUN_FILE).get("id") if run.resumed else None
        if not isinstance(run_id, str):
            run_id = generate_id()
        # kept before wandb starts: a run stopped during its start still resumes the same W&B run
        store_run(run.run_dir, RUN_FILE, {"id": run_id})
        if run.run_dir is not None:  # W&B's own files go to RUN/wandb: not through a link out of the run folder
            files.confined(run.run_dir / "wandb", run.run_dir)
        self.run = wandb.init(project=self.project or os.environ.get("WANDB_PROJECT") or "torchwise",
                              name=run.run_name, id=run_id, resume="allow", config=run.config,
                              dir=str(run.run_dir) if run.run_dir is not None else None,
                              mode=self.mode or os.environ.get("WANDB_MODE") or "offline",
                              # the user's own wandb runs in this process are left as they are
                              reinit="create_new")

    def log_metrics(self, row: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log(numbers_of(row), step=step)

    def log_train(self, values: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log({f"train/{k}": v for k, v in numbers_of(values).items()}, step=step)

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=EXIT_CODE.get(status, 1))
            self.run = None
