"""`torchwise train`: an image folder or a CSV file to a trained, evaluated, reported run.

    torchwise train --data images/ --out runs/exp1 --epochs 5
    torchwise train --data table.csv --target price --out runs/price
    torchwise train --config run.yaml --set train.lr=0.003
    torchwise train --out runs/exp1 --resume --epochs 10     (continue, with more epochs)

The run directory gets config.yaml, split.json, data_stats.json, meta.json (written before
training, so an interrupted run can still be evaluated), and from the Trainer metrics.csv, tb/,
checkpoints/ and final/; then eval.json and report.html.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from torchwise.errors import TorchwiseError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Every flag defaults to None: only what the user typed overrides --config (see config.FLAG_KEYS).
    # Values are plain text checked by torchwise.config (not argparse choices), so a typo gets the
    # same "allowed values / did you mean" answer from a flag, a --set or a YAML file.
    data = parser.add_argument_group("data")
    data.add_argument("--data", metavar="PATH", help="image folder (class folders, or train/ and val/) or a CSV file")
    data.add_argument("--target", metavar="COLUMN", help="CSV: the column to predict")
    data.add_argument("--problem", metavar="P", help="CSV: auto (default), classification or regression")
    data.add_argument("--val-fraction", metavar="F", help="held out per class without a val/ folder (default 0.2)")
    data.add_argument("--image-size", metavar="N", help="square input side (default: 224 for torchvision models, "
                                                        "the images' median side up to 64 for smallcnn/mlp)")
    data.add_argument("--missing", metavar="HOW", help="CSV rows with missing values: drop (default) or impute")
    data.add_argument("--num-workers", metavar="N", help="DataLoader workers (default auto)")
    model = parser.add_argument_group("model")
    model.add_argument("--model", metavar="NAME", help="auto (default), smallcnn, mlp, resnet18, mobilenet_v3_small, "
                                                       "efficientnet_b0, ... or pkg.module:callable")
    model.add_argument("--weights", metavar="FILE", help="LOCAL pretrained state dict (.safetensors/.pt)")
    model.add_argument("--freeze-backbone", action="store_const", const=True,
                       help="train only the new classification head")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", metavar="N", help="default 10")
    train.add_argument("--max-steps", metavar="N", help="stop after N optimizer steps")
    train.add_argument("--batch-size", metavar="N", help="default 64")
    train.add_argument("--lr", metavar="LR", help="peak learning rate (default 1e-3)")
    train.add_argument("--seed", metavar="N", help="default 0")
    train.add_argument("--precision", metavar="P", help="auto (default), fp32, bf16 or fp16")
    train.add_argument("--device", metavar="DEV", help="auto (default), cpu, cuda, cuda:1, mps")
    train.add_argument("--checkpoint-every", metavar="STEPS", help="default: every epoch")
    train.add_argument("--fast", metavar="PARTS", help="speed switches: auto (default), off, or parts joined by "
                                                       "commas (channels_last, tf32, fused_optimizer, compile, "
                                                       "prefetch, sync_free, cuda_graph); each is reported at start")
    train.add_argument("--profile", metavar="STEPS", help="profile STEPS optimizer steps after a warm-up: a table "
                                                          "of the top operators and a trace for TensorBoard/Perfetto")
    train.add_argument("--resume", action="store_const", const=True,
                       help="continue the run in --out from its last complete checkpoint (uses its config.yaml)")
    out = parser.add_argument_group("output and configuration")
    out.add_argument("--out", metavar="RUNDIR", help="run directory (required)")
    out.add_argument("--config", metavar="FILE", help="YAML file with sections data/model/train/output")
    out.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override any configuration key, e.g. --set train.scheduler=onecycle (repeatable)")
    out.add_argument("--show-config", action="store_true", help="print the resolved configuration and every key; "
                                                                 "do not train")
    out.add_argument("--quiet", action="store_true", help="no progress bars")
    dist = parser.add_argument_group("several processes (DDP through torchrun)")
    dist.add_argument("--nproc", type=int, metavar="N", help="processes on this machine (one per GPU; gloo on CPU)")
    dist.add_argument("--nnodes", type=int, default=1, metavar="M", help="machines taking part (default 1)")
    dist.add_argument("--node-rank", type=int, default=0, metavar="R", help="this machine's rank, 0..M-1")
    dist.add_argument("--master", metavar="HOST:PORT", help="rank 0's machine (default: 127.0.0.1 and a free port)")


# ----------------------------------------------------------------------------- configuration


def resolve_config(args: argparse.Namespace):
    from torchwise import config as cfg

    flags = {dest: getattr(args, dest, None) for dest in cfg.FLAG_KEYS}
    base = None
    # --resume without --config continues with the run's own saved configuration, so the user
    # does not have to repeat every flag; flags given now (e.g. more --epochs) still win.
    if args.resume and not args.config and args.out and (Path(args.out) / "config.yaml").is_file():
        base = cfg.load_yaml(Path(args.out) / "config.yaml")
    config = cfg.resolve(config_file=args.config, base=base, flags=flags, sets=args.set)
    if getattr(args, "quiet", False):
        config = cfg.apply_overrides(config, {"output.progress": False})
    return config


def _progress_enabled(setting: Any) -> bool:
    return sys.stderr.isatty() if setting == "auto" else bool(setting)


# ----------------------------------------------------------------------------- the run


def _optimizer_factory(train_cfg):
    import torch

    def make(params, fused: bool = False):  # `fused`: the Trainer's fast plan decides (train.fast)
        trainable = [p for p in params if p.requires_grad]  # a frozen backbone is not optimized
        if train_cfg.optimizer == "sgd":
            return torch.optim.SGD(trainable, lr=train_cfg.lr, momentum=0.9, nesterov=True,
                                   weight_decay=train_cfg.weight_decay, fused=fused or None)
        return torch.optim.AdamW(trainable, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, fused=fused or None)

    return make


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    if resume:
        if not (run_dir / "checkpoints").is_dir():
            raise TorchwiseError("Nothing to resume: the run directory has no checkpoints.",
                                 values={"out": str(run_dir)}, fix="drop --resume to start this run")
        return
    if (run_dir / "checkpoints").exists() or (run_dir / "final").exists():
        raise TorchwiseError("The run directory already holds a run.", values={"out": str(run_dir)},
                             fix="add --resume to continue it, or choose a new --out directory")


def _check_resume_plan(config, run_dir: Path) -> None:
    """A one-cycle or cosine schedule is planned for the run's total length; resuming with another
    --epochs/--max-steps would either crash (OneCycleLR refuses to step past its total) or make
    the learning rate jump. Say so up front instead."""
    from torchwise import config as cfg

    saved_path = run_dir / "config.yaml"
    if not config.train.resume or not saved_path.is_file():
        return
    saved = cfg.load_yaml(saved_path).train
    now = config.train
    changed = {key: f"{getattr(saved, key)} -> {getattr(now, key)}" for key in ("epochs", "max_steps")
               if getattr(saved, key) != getattr(now, key)}
    if changed and saved.scheduler in ("onecycle", "cosine"):
        raise TorchwiseError(
            f"This run's {saved.scheduler} learning-rate schedule was planned for its original length.",
            values={"run": str(run_dir), "changed": changed, "scheduler": saved.scheduler},
            fix="resume with the original length (drop these flags), or train longer as a new run starting "
                f"from this one: --weights {run_dir / 'final' / 'model.safetensors'} --out NEW_RUNDIR")


def _with_absolute_paths(config):
    """The saved config names files absolutely, so `--resume` and `eval` work from any directory."""
    data = dataclasses.replace(config.data, path=str(Path(config.data.path).resolve()) if config.data.path else None)
    model = dataclasses.replace(config.model,
                                weights=str(Path(config.model.weights).resolve()) if config.model.weights else None)
    return dataclasses.replace(config, data=data, model=model)


def _step_of(checkpoint: Path | None) -> int:
    if checkpoint is None:
        return 0
    digits = "".join(ch for ch in Path(checkpoint).name if ch.isdigit())
    return int(digits) if digits else 0


def train_run(config, *, log=print, on_trainer=None) -> dict[str, Any]:
    """Train, evaluate and report one run described by a resolved RunConfig; returns a summary.

    `on_trainer(trainer)` is called before training starts (e.g. `torchwise tune` registers its
    evaluation callback there)."""
    import torch

    from torchwise.data.tasks import prepare_task
    from torchwise.models import build_model
    from torchwise.train.reproducibility import seed_everything

    if not config.output.dir:
        raise TorchwiseError("No run directory given.", values={"output.dir": None},
                             fix="pass --out RUNDIR (where checkpoints, metrics and the report go)")
    run_dir = Path(config.output.dir)
    # Under torchrun every rank runs this function; rank 0 alone checks, writes and reports, and the
    # others prepare their data after it (so they never read a half-written file).
    dist_env = _join_process_group(config)
    main = dist_env.is_main
    if not main:
        log = lambda *_args, **_kwargs: None  # noqa: E731
    if main:
        _check_run_dir(run_dir, config.train.resume)
        _check_resume_plan(config, run_dir)
    started = time.perf_counter()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    config = _with_absolute_paths(config)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        # `resume` is what this invocation does, not a property of the run: a saved `resume: true`
        # would make `--config RUN/config.yaml` fail for a new run.
        dataclasses.replace(config, train=dataclasses.replace(config.train, resume=False)).save(run_dir / "config.yaml")
        task = prepare_task(config, run_dir, progress=_progress_enabled(config.output.progress), log=log)
    from torchwise.train.distributed import barrier

    barrier(dist_env)
    if not main:
        task = prepare_task(config, None)
    _log_data(task, log)
    _log_loss(config, task, log)
    meta = {**task.meta(), "data_path": str(Path(config.data.path).resolve())}
    if main:
        (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))

    # The weights are initialized here, before the Trainer seeds anything: seed now, or the same
    # --seed would give a different model on every run.
    seed_everything(config.train.seed)
    model = build_model(**task.model_kwargs, weights=config.model.weights)
    trainer = _make_trainer(config, task, model, run_dir, meta)
    if on_trainer is not None:
        on_trainer(trainer)
    fit_started = time.perf_counter()
    result = trainer.fit()
    timing = _timing(result, time.perf_counter() - fit_started, config, task, trainer)

    evaluation, worst = _evaluate(trainer, task, meta, run_dir, config.output.worst_examples, write=main)
    report_path = None
    if not main:
        return {"run_dir": str(run_dir), "evaluation": evaluation, "timing": timing, "report": None,
                "final": str(result.final_path)}
    if config.output.report:
        timing["run_time_s"] = round(time.perf_counter() - started, 2)
        report_path = _report(run_dir, config, task, evaluation, worst, timing)
    timing["run_time_s"] = round(time.perf_counter() - started, 2)
    summary = {"run_dir": str(run_dir), "evaluation": evaluation, "timing": timing,
               "report": str(report_path) if report_path else None, "final": str(result.final_path)}
    _log_result(summary, log)
    return summary


def _make_trainer(config, task, model, run_dir: Path, meta: dict[str, Any]):
    from torchwise.train.early_stop import EarlyStopping
    from torchwise.train.trainer import Trainer

    t = config.train
    return Trainer(
        model, optimizer=_optimizer_factory(t), train_data=task.train, val_data=task.val,
        loss=task.loss(), task=task.problem, max_epochs=t.epochs, max_steps=t.max_steps, batch_size=t.batch_size,
        eval_batch_size=t.eval_batch_size,
        accumulate=t.accumulate, clip_grad_norm=t.clip_grad_norm, precision=t.precision, device=t.device,
        seed=t.seed, deterministic=t.deterministic, out_dir=run_dir, checkpoint_every=t.checkpoint_every,
        keep_last=t.keep_last, resume=t.resume, progress=config.output.progress,
        scheduler=None if t.scheduler == "none" else t.scheduler, warmup_steps=t.warmup_steps,
        early_stopping=EarlyStopping(patience=t.early_stopping) if t.early_stopping else None,
        num_workers=config.data.num_workers, config=config.to_dict(), metadata=meta, strategy=t.strategy,
        on_oom=t.on_oom, eval_every=t.eval_every, profile=t.profile,
        fast=t.fast if t.fast in ("auto", "off") else [part.strip() for part in t.fast.split(",") if part.strip()],
        batch_augment=task.batch_augment, batch_eval=task.batch_eval,
    )


def _timing(result, train_time: float, config, task, trainer) -> dict[str, Any]:
    import torch

    t = config.train
    steps_now = result.steps - _step_of(result.resumed_from)
    # Every batch is full except the last of each epoch, so this overcounts by less than one batch per epoch.
    samples = min(steps_now * t.batch_size * t.accumulate, max(1, result.epochs) * len(task.train)) if steps_now else 0
    return {"train_time_s": round(train_time, 2), "steps": result.steps, "steps_this_session": steps_now,
            "epochs": result.epochs, "samples_per_s": round(samples / train_time, 1) if train_time > 0 else None,
            "steps_per_s": round(steps_now / train_time, 2) if train_time > 0 else None,
            "stopped_early": result.stopped_early, "skipped_steps": result.skipped_steps,
            "device": str(trainer.device), "threads": torch.get_num_threads()}


def _evaluate(trainer, task, meta: dict[str, Any], run_dir: Path, n_worst: int, write: bool = True):
    """Validation metrics of the final weights (the same functions `torchwise eval` uses) -> eval.json."""
    from torchwise.cli.eval import evaluate_outputs, worst_examples

    outputs, targets = trainer.predict(task.val)
    evaluation = evaluate_outputs(outputs, targets, meta)
    worst = []
    if task.problem == "classification":
        worst = worst_examples(outputs, targets, task.val_ids, task.class_names, n_worst)
    if write:
        (run_dir / "eval.json").write_text(json.dumps({**evaluation, "worst": worst, "data": task.summary}, indent=2))
    return evaluation, worst


def _join_process_group(config):
    """The torchrun environment, with the process group joined early (before any file is written)."""
    from torchwise.train import distributed

    env = distributed.env_from_torchrun()
    if env.enabled:
        distributed.setup(config.train.device, timeout_s=300.0)
    return env


def _report(run_dir: Path, config, task, evaluation, worst, timing) -> Path:
    from torchwise.report.html import write_report
    from torchwise.report.plots import thumbnail_png

    if task.val_image is not None:
        worst = [{**item, "png": thumbnail_png(task.val_image(item["index"]))} for item in worst]
    return write_report(run_dir, title=f"torchwise run: {run_dir.name}", summary=task.summary,
                        evaluation=evaluation, class_names=task.class_names, worst=worst,
                        timing=timing, config=config.to_dict())


def _log_data(task, log) -> None:
    s = task.summary
    if task.kind == "image":
        train_n, val_n = sum(s["train_counts"].values()), sum(s["val_counts"].values())
        log(f"data: {s['root']} ({s['layout']}): {len(task.class_names)} classes, {train_n} train / {val_n} val "
            f"images, input {s['input']}, normalization from {s['normalization']}, augmentation "
            f"{s.get('augmentation', 'in the loader')}")
    else:
        log(f"data: {s['root']}: {s['problem']} of {s['target']!r}, {s['train_rows']} train / {s['val_rows']} val "
            f"rows, {s['features']} features")
        for key in ("dropped_missing_target", "dropped_missing_features", "imputed_values"):
            if s.get(key):
                log(f"data: {key.replace('_', ' ')}: {s[key]}")
        for column, why in (s.get("ignored_columns") or {}).items():
            log(f"data: ignored column {column!r}: {why}")
    skipped = s.get("skipped") or []
    if skipped:
        log(f"data: skipped {len(skipped)} unreadable image(s) (listed in the report):")
        for item in skipped[:5]:
            log(f"  {item['path']}: {item['reason']}")


def _log_loss(config, task, log) -> None:
    """Say which loss trains the model when it is not the plain default, and the validation batch."""
    if task.class_weights is not None:
        from torchwise.data.tasks import describe_class_weights

        log(f"loss: cross-entropy weighted per class (train.class_weights={config.train.class_weights}; "
            f"training loss and val_loss): {describe_class_weights(task)}")
    if config.train.eval_batch_size is not None:
        log(f"data: validation and evaluation batches of {config.train.eval_batch_size} "
            f"(training batches of {config.train.batch_size})")


def _log_result(summary: dict[str, Any], log) -> None:
    ev, timing = summary["evaluation"], summary["timing"]
    if ev["problem"] == "classification":
        score = f"val accuracy {ev['accuracy']:.4f}"
    else:
        score = f"val RMSE {ev['rmse']:.4g}, MAE {ev['mae']:.4g}, R² {ev['r2']:.3f}"
    epochs = f"{timing['epochs']} epoch" + ("" if timing["epochs"] == 1 else "s")
    log(f"done: {score} after {timing['steps']} steps ({epochs}) in {timing['train_time_s']:.1f} s "
        f"({timing['samples_per_s']} samples/s)")
    log(f"weights: {summary['final']}")
    if summary["report"]:
        log(f"report:  {summary['report']}")


LAUNCH_FLAGS = {"--nproc": 1, "--nnodes": 1, "--node-rank": 1, "--master": 1}


def _launch(args: argparse.Namespace) -> int:
    """Re-run this same command on N processes through torchrun, without the launch flags."""
    from torchwise.train.distributed import launch

    argv, rest = [], list(sys.argv[1:])
    while rest:
        item = rest.pop(0)
        name = item.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            if "=" not in item:
                rest.pop(0)
            continue
        argv.append(item)
    return launch(["torchwise", *argv], nproc=args.nproc, nnodes=args.nnodes, node_rank=args.node_rank,
                  master=args.master)


def run(args: argparse.Namespace) -> int:
    import os

    if args.nproc and "LOCAL_RANK" not in os.environ:
        return _launch(args)
    config = resolve_config(args)
    if args.show_config:
        from torchwise import config as cfg
        import yaml

        print(yaml.safe_dump(config.to_dict(), sort_keys=False))
        print("# every key (set with --set section.key=value):")
        print("\n".join("# " + line for line in cfg.describe().splitlines()))
        return 0
    from torchwise.train.distributed import leave

    succeeded = False
    try:
        train_run(config)
        succeeded = True
    finally:
        leave(together=succeeded)  # under torchrun: every rank leaves the group before the interpreter ends
    return 0
