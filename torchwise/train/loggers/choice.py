"""The `loggers` setting read: names of the built-in loggers and logger objects of the user's own, checked
before anything is written (an unknown name says which one was meant)."""
from __future__ import annotations

from typing import Any, Callable

from torchwise.errors import ConfigError
from torchwise.train.input_checks import did_you_mean
from torchwise.train.loggers.csv_file import CsvLogger
from torchwise.train.loggers.external import require_installed
from torchwise.train.loggers.mlflow_run import INSTALL as MLFLOW_INSTALL
from torchwise.train.loggers.mlflow_run import MlflowLogger
from torchwise.train.loggers.tensorboard_events import TensorBoardLogger
from torchwise.train.loggers.wandb_run import INSTALL as WANDB_INSTALL
from torchwise.train.loggers.wandb_run import WandbLogger

BUILT_IN: dict[str, Callable[[], Any]] = {"csv": CsvLogger, "tensorboard": TensorBoardLogger,
                                          "mlflow": MlflowLogger, "wandb": WandbLogger}
PACKAGES = {"mlflow": ("mlflow", MLFLOW_INSTALL), "wandb": ("wandb", WANDB_INSTALL)}


def logger_entries(value: Any, *, tensorboard: bool = True) -> list[Any]:
    """The setting as a list of names and objects: None is csv and tensorboard (tensorboard=False drops
    it); a string is one name or names joined by commas; one object is a list of one."""
    if value is None:
        return ["csv", "tensorboard"] if tensorboard else ["csv"]
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def check_loggers(value: Any, *, tensorboard: bool = True) -> list[Any]:
    """The entries, each a known name (lower case) or an object with log_metrics; a ConfigError otherwise."""
    entries = []
    for entry in logger_entries(value, tensorboard=tensorboard):
        if isinstance(entry, str):
            entry = entry.lower()
            if entry not in BUILT_IN:
                guess = did_you_mean(entry, BUILT_IN)
                raise ConfigError(f"Unknown logger {entry!r}.",
                                  values={"logger": entry, "did you mean": guess, "loggers": ", ".join(BUILT_IN)},
                                  fix=("Use one of the loggers listed" + (f" (did you mean {guess!r}?)" if guess != "-"
                                       else "") + ", or pass an object with log_metrics(row, step)."))
            if entry == "tensorboard" and not tensorboard:
                raise ConfigError("loggers names 'tensorboard' but tensorboard=False.",
                                  values={"loggers": value, "tensorboard": tensorboard},
                                  fix="Drop 'tensorboard' from loggers, or leave tensorboard=True.")
            if entry in entries:
                continue
        elif not callable(getattr(entry, "log_metrics", None)):
            raise ConfigError("A logger object has no log_metrics(row, step) method.",
                              values={"logger": type(entry).__name__, "loggers": value},
                              fix="Give it log_metrics(row, step) (start(run) and finish(status) are optional; "
                                  "see torchwise.train.loggers), or pass a name: " + ", ".join(BUILT_IN) + ".")
        entries.append(entry)
    return entries


def choose_loggers(value: Any, *, tensorboard: bool = True) -> list[Any]:
    """The logger objects of the setting; the packages the named ones need are checked to be installed."""
    entries = check_loggers(value, tensorboard=tensorboard)
    for entry in entries:
        if isinstance(entry, str) and entry in PACKAGES:
            require_installed(entry, *PACKAGES[entry])
    return [BUILT_IN[entry]() if isinstance(entry, str) else entry for entry in entries]
