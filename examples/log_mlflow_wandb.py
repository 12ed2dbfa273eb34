"""A run logged to MLflow (its local file store, no server) and to Weights & Biases (offline: nothing
is sent; `wandb sync RUN_DIR/wandb/offline-run-*` uploads it later), next to metrics.csv.

    python examples/log_mlflow_wandb.py RUN_DIR

Then `mlflow ui --backend-store-uri RUN_DIR/mlruns` shows the run (with the full mlflow package).
"""
from __future__ import annotations

import argparse
import os

import torch
from torch import nn


def main() -> None:
    import torchwise
    from sklearn.datasets import load_digits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    trainer = torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_data=(x[:1400], y[:1400]),
                                val_data=(x[1400:], y[1400:]), epochs=3, batch_size=64, out_dir=args.out_dir,
                                loggers=["csv", "mlflow", "wandb"], seed=0)
    result = trainer.fit()
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=f"file:{os.path.abspath(args.out_dir)}/mlruns")
    run = client.search_runs([e.experiment_id for e in client.search_experiments()])[0]
    print(f"val_acc {result.history[-1]['val_acc']:.4f}; mlflow run {run.info.status}, "
          f"{len(client.get_metric_history(run.info.run_id, 'val_acc'))} val_acc points; "
          f"wandb offline files: {len(list((trainer.config.out_dir / 'wandb').glob('offline-run-*')))}")


if __name__ == "__main__":
    main()
