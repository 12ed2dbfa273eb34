"""Where the Trainer's metrics go: loggers, chosen with the `loggers` setting.

    Trainer(..., loggers=["csv", "tensorboard", "mlflow", "wandb", my_logger])

None (the default) is ["csv", "tensorboard"], and tensorboard=False drops tensorboard. Only the main rank
logs. The protocol (torchwise.train.loggers.Logger); a logger of your own needs only log_metrics:

    start(run: RunInfo)            once before training: run.run_dir (None without out_dir), run.config (the
                                   resolved config as plain values), run.resumed and run.resume_step,
                                   run.columns (the row's columns), run.metadata
    log_metrics(row: dict, step)   one row per evaluation: epoch, step, train_loss, val_*, lr, grad_norm, ...
    log_train(values: dict, step)  optional: loss, lr, grad_norm every log_every steps
    finish(status: str)            once at the end: "finished", "failed" or "killed" (Ctrl-C)

The built-in ones: "csv" (<run>/metrics.csv), "tensorboard" (<run>/tb), "mlflow" (MLflow's local file store
<run>/mlruns unless MLFLOW_TRACKING_URI is set; experiment MLFLOW_EXPERIMENT_NAME or "torchwise") and
"wandb" (Weights & Biases, offline unless WANDB_MODE is set; files in <run>/wandb). MlflowLogger(...) and
WandbLogger(...) objects can be passed too, to set their tracking URI, experiment, project or mode.

A logger that raises while the run trains is named with its error on stderr and the others go on (the
run too); one that fails to start stops the run before its first step. A resumed run appends: metrics.csv
drops the rows after the resumed step, TensorBoard purges them, MLflow and W&B continue the run whose id
the run folder keeps (mlflow_run.json, wandb_run.json); rows the stopped run logged after its checkpoint
stay in MLflow's history beside the new ones (W&B keeps the first it got for a step).
"""
from torchwise.train.loggers.choice import BUILT_IN, check_loggers, choose_loggers
from torchwise.train.loggers.csv_file import CsvLogger
from torchwise.train.loggers.mlflow_run import MlflowLogger
from torchwise.train.loggers.protocol import Logger, RunInfo, name_of, status_of
from torchwise.train.loggers.tensorboard_events import TensorBoardLogger
from torchwise.train.loggers.wandb_run import WandbLogger

__all__ = ["BUILT_IN", "CsvLogger", "Logger", "MlflowLogger", "RunInfo", "TensorBoardLogger", "WandbLogger",
           "check_loggers", "choose_loggers", "name_of", "status_of"]
