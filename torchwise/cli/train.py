"""`torchwise train`: an image folder or a CSV file to a trained, evaluated, reported run.

    torchwise train --data images/ --out runs/exp1 --epochs 5
    torchwise train --data table.csv --target price --out runs/price
    torchwise train --config run.yaml --set train.lr=0.003
    torchwise train --out runs/exp1 --resume --epochs 10     (continue, with more epochs)

The run directory gets config.yaml, split.json, data_stats.json, meta.json (written once every
check has passed and the checkpoint, on resume, is loaded: before the first training step, so an
interrupted run can still be evaluated), and from the Trainer metrics.csv, tb/, checkpoints/ and
final/; then eval.json and report.html. A refused command changes nothing on disk: every check
(the --out path, the run already there, the settings, the model name, the data) runs first.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
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
    data.add_argument("--decimal", metavar="MARK", help="CSV: the decimal mark of number columns: auto (default), "
                                                         "point or comma")
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
    # --resume continues with the run's own saved configuration, so the user does not have to repeat
    # every flag; what is given now (a --config file, flags, --set) goes on top, and plan_resume
    # decides which of those changes a resumed run can take.
    if getattr(args, "resume", None) and args.out and (Path(args.out) / "config.yaml").is_file():
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


# What the run directory holds, by kind: a file of that name where a folder belongs (or the other way
# round) would only fail later, in the middle of the run.
RUN_FOLDERS = ("checkpoints", "final", "best", "tb")
RUN_FILES = ("config.yaml", "split.json", "data_stats.json", "meta.json", "metrics.csv", "eval.json", "report.html",
             "trainer_config.json")
OUT_FIX = "pass --out a folder that can be created and written (a new one is created, with its parents)"


def _check_out_dir(run_dir: Path) -> None:
    """--out must be a folder that exists or can be created, and be writable: said before anything is read."""
    try:
        if run_dir.exists() and not run_dir.is_dir():
            raise TorchwiseError("--out names a file, not a run directory.",
                                 values={"out": str(run_dir), "size": f"{run_dir.stat().st_size} bytes"}, fix=OUT_FIX)
        existing = run_dir.absolute()
        while not existing.exists():
            existing = existing.parent
    except OSError as exc:
        raise TorchwiseError("--out cannot be looked at.", values={"out": str(run_dir), "error": exc.strerror},
                             fix=OUT_FIX) from None
    if not existing.is_dir():
        raise TorchwiseError("--out lies inside a file, not a folder.",
                             values={"out": str(run_dir), "file": str(existing)}, fix=OUT_FIX)
    try:  # the one sure test of "can be written" (root ignores permission bits; /proc refuses anyway)
        os.rmdir(tempfile.mkdtemp(prefix=".torchwise-probe-", dir=existing))
    except OSError as exc:
        raise TorchwiseError("--out cannot be created or written.",
                             values={"out": str(run_dir), "folder": str(existing), "error": exc.strerror},
                             fix=OUT_FIX) from None
    for name in RUN_FOLDERS:
        if (run_dir / name).exists() and not (run_dir / name).is_dir():
            raise TorchwiseError("The run directory holds a file where torchwise keeps a folder.",
                                 values={"path": str(run_dir / name), "expected": "a folder"},
                                 fix=f"move {run_dir / name} away, or choose another --out directory")
    for name in RUN_FILES:
        if (run_dir / name).is_dir():
            raise TorchwiseError("The run directory holds a folder where torchwise writes a file.",
                                 values={"path": str(run_dir / name), "expected": "a file"},
                                 fix=f"move {run_dir / name} away, or choose another --out directory")


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    from torchwise.train import checkpoint as ckpt

    complete = ckpt.list_checkpoints(run_dir / "checkpoints")
    if resume:
        if not complete:
            # a run stopped before its first checkpoint has nothing to continue: it starts again
            left = sorted(p.name for p in (run_dir / "checkpoints").iterdir()) if (run_dir / "checkpoints").is_dir() else []
            raise TorchwiseError("Nothing to resume: the run directory has no complete checkpoint.",
                                 values={"out": str(run_dir), "exists": run_dir.is_dir(),
                                         "checkpoints": ", ".join(left) or "none"},
                                 fix="drop --resume to start this run from the beginning")
        return
    if complete:
        raise TorchwiseError("The run directory already holds a run.",
                             values={"out": str(run_dir), "latest checkpoint": complete[-1].name},
                             fix="add --resume to continue it, or choose a new --out directory")
    if (run_dir / "final").exists():
        raise TorchwiseError("The run directory already holds a finished run (final/, without checkpoints to "
                             "resume from).", values={"out": str(run_dir)},
                             fix="choose a new --out directory (or move its final/ folder away to train there again)")


def _check_up_front(config) -> None:
    """What can be refused before the data are read (a scan of a large folder takes minutes)."""
    from torchwise import models
    from torchwise.data.tasks import is_csv, resolve_model_name
    from torchwise.train.precision import choose_device

    d = config.data
    if not d.path:
        raise TorchwiseError("No data given.", values={"data.path": None},
                             fix="pass --data FOLDER (class folders) or --data FILE.csv --target COLUMN")
    if not Path(d.path).exists():
        raise TorchwiseError("The data path does not exist.", values={"data": d.path},
                             fix="pass --data an image folder or a CSV file")
    name = resolve_model_name(config.model.name, "tabular" if is_csv(d.path) else "image")
    models.check_model_name(name)
    if config.model.weights and not config.train.resume and not Path(config.model.weights).is_file():
        raise TorchwiseError("The --weights file does not exist.", values={"weights": config.model.weights},
                             fix="pass the path of a local .safetensors or .pt state dict (nothing is downloaded)")
    choose_device(config.train.device)


# ----------------------------------------------------------------------------- resume: which settings may change
#
# A resumed run continues the checkpoint, so each setting given again with another value is either
# applied, ignored (said, with both values) or refused (the run would no longer be the one the
# checkpoint belongs to). config.yaml then holds what the run really uses: the saved values plus
# the applied changes, never an ignored or refused one.

# How and where the run computes, and what it records, but not what it learns: applied.
RESUME_APPLIED = frozenset({
    "data.num_workers", "data.cache", "data.cache_dir",
    "train.device", "train.precision", "train.fast", "train.threads", "train.profile", "train.deterministic",
    "train.eval_batch_size", "train.eval_every", "train.on_oom", "train.checkpoint_every", "train.keep_last",
    "output.report", "output.worst_examples", "output.progress",
})
# The run's length: applied (a longer or shorter run), unless the schedule was laid out for the old length.
RESUME_LENGTH = frozenset({"train.epochs", "train.max_steps"})
LAID_OUT_SCHEDULES = ("onecycle", "cosine")
# Only where the run started from: the checkpoint's weights replace them, so a new value is ignored.
RESUME_IGNORED = {"model.weights": "the checkpoint's weights replace the starting weights"}
# This invocation rather than the run; data.path may name moved data, checked after reading (_check_same_data).
RESUME_NOT_COMPARED = frozenset({"train.resume", "output.dir", "data.path"})
# Every other setting is refused: the data's split and preprocessing, the model, the optimizer, the
# learning rate and its schedule, the batch, the seed, the loss, the strategy (and any key added later).


def resume_policy(key: str, saved_scheduler: str) -> str:
    """'applied', 'ignored' or 'refused' for a setting changed on resume."""
    if key in RESUME_LENGTH:
        return "refused" if saved_scheduler in LAID_OUT_SCHEDULES else "applied"
    if key in RESUME_APPLIED:
        return "applied"
    return "ignored" if key in RESUME_IGNORED else "refused"


def _flat(config) -> dict[str, Any]:
    return {f"{section}.{key}": value for section, values in config.to_dict().items() for key, value in values.items()}


def plan_resume(config, run_dir: Path, checkpoint: Path, log=print):
    """The configuration a resumed run uses: its saved config.yaml plus the changes it can take."""
    from torchwise import config as cfg

    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise TorchwiseError("The run to resume has no config.yaml (the settings it was trained with).",
                             values={"out": str(run_dir), "missing": str(saved_path)},
                             fix="restore config.yaml into the run directory, or start a new run with another --out")
    saved = _with_absolute_paths(cfg.load_yaml(saved_path))
    was, now = _flat(saved), _flat(_with_absolute_paths(config))
    changed = {key: (was[key], now[key]) for key in was if key not in RESUME_NOT_COMPARED and was[key] != now[key]}
    by_policy: dict[str, dict[str, tuple[Any, Any]]] = {"applied": {}, "ignored": {}, "refused": {}}
    for key, values in changed.items():
        by_policy[resume_policy(key, saved.train.scheduler)][key] = values
    refused = by_policy["refused"]
    weights_fix = (f"train longer or differently as a new run that starts from this one's weights: --weights "
                   f"{checkpoint / 'model.safetensors'} --out NEW_RUNDIR")
    if refused and set(refused) <= RESUME_LENGTH:
        raise TorchwiseError(
            f"This run's {saved.train.scheduler} learning-rate schedule was planned for its original length.",
            values={"run": str(run_dir), **{key: f"saved {a}, given {b}" for key, (a, b) in refused.items()},
                    "scheduler": saved.train.scheduler},
            fix=f"resume with the original length (drop these flags), or {weights_fix}")
    if refused:
        raise TorchwiseError(
            "These settings cannot change when a run is resumed: its checkpoint was trained with the saved values.",
            values={"run": str(run_dir), **{key: f"saved {a}, given {b}" for key, (a, b) in refused.items()}},
            fix=f"drop them to continue the run as it was, or {weights_fix}")
    for key, (a, b) in by_policy["applied"].items():
        log(f"resume: {key} changes from {a} to {b}")
    for key, (a, b) in by_policy["ignored"].items():
        log(f"resume: ignoring {key}={b}: the run keeps {a} ({RESUME_IGNORED[key]})")
    tree = saved.to_dict()
    for key, (_, b) in by_policy["applied"].items():
        section, _, name = key.partition(".")
        tree[section][name] = b
    tree["data"]["path"] = now["data.path"]
    tree["output"]["dir"] = config.output.dir
    tree["train"]["resume"] = True
    return cfg.from_dict(tree)


def _comparable(value: Any) -> Any:
    """JSON content with floats rounded (recomputed normalization statistics may differ in the last digits)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


# Where the data live is not part of what they are: moved data resume as well.
NOT_THE_DATA = {"split.json": ("root", "skipped"), "meta.json": ("data_path",)}


def _check_same_data(run_dir: Path, now: dict[str, dict[str, Any]], data_path: str) -> None:
    """A resumed run trains on the data of its checkpoint: the same split (the same files or rows,
    train and val) and the same preprocessing (classes, input, normalization, encoders)."""
    differs, then_root = [], None
    for name, fresh in now.items():
        path = run_dir / name
        if not path.is_file():
            continue  # a run from before these files were kept: the Trainer still compares sample counts
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            raise TorchwiseError(f"The run's {name} is damaged (not valid JSON).", values={"path": str(path)},
                                 fix="restore it from a backup, or start a new run with another --out") from None
        then_root = then_root or saved.get("root") or saved.get("data_path")
        skip = NOT_THE_DATA.get(name, ())
        keys = sorted(set(saved) | set(fresh))
        differs += [f"{name}:{key}" for key in keys if key not in skip
                    and _comparable(saved.get(key)) != _comparable(fresh.get(key))]
    if differs:
        raise TorchwiseError(
            "The training data differ from the data of the run being resumed.",
            values={"run": str(run_dir), "data then": then_root or "-", "data now": data_path,
                    "differs in": ", ".join(differs)},
            fix="resume with the run's own data (drop --data), or start a new run with another --out")


def _with_absolute_paths(config):
    """The saved config names files absolutely, so `--resume` and `eval` work from any directory."""
    data = dataclasses.replace(config.data, path=str(Path(config.data.path).resolve()) if config.data.path else None)
    model = dataclasses.replace(config.model,
                                weights=str(Path(config.model.weights).resolve()) if config.model.weights else None)
    return dataclasses.replace(config, data=data, model=model)


def _publish(staging: Path, run_dir: Path) -> None:
    """The prepared run files into the run directory, each replaced atomically (never half written)."""
    from torchwise.files import atomic_write_path

    for path in sorted(staging.iterdir()):
        with atomic_write_path(run_dir / path.name) as tmp:
            tmp.write_bytes(path.read_bytes())


def _step_of(checkpoint: Path | None) -> int:
    if checkpoint is None:
        return 0
    digits = "".join(ch for ch in Path(checkpoint).name if ch.isdigit())
    return int(digits) if digits else 0


def train_run(config, *, log=print, on_trainer=None) -> dict[str, Any]:
    """Train, evaluate and report one run described by a resolved RunConfig; returns a summary.

    `on_trainer(trainer)` is called before training starts (e.g. `torchwise tune` registers its
    evaluation callback there)."""
    from torchwise import files
    from torchwise.train import checkpoint as ckpt

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
        _check_out_dir(run_dir)
        _check_run_dir(run_dir, config.train.resume)
    if config.train.resume:  # every rank, so that all train with the same settings (only reads files)
        checkpoint = ckpt.find_resume_checkpoint(True, run_dir, warn=None)  # the Trainer warns, once
        config = plan_resume(config, run_dir, checkpoint, log)
    _check_up_front(config)
    # The run's own files are prepared in a private folder and copied into the run directory only once
    # the Trainer has passed its checks too (fit_start): a refused command leaves the run as it was.
    staging = Path(tempfile.mkdtemp(prefix="torchwise-run-")) if main else None
    try:
        return _train_in(config, run_dir, staging, dist_env, log, on_trainer)
    except OSError as exc:  # a write into the run directory failed midway (disk full, file size limit)
        raise files.write_error("A file of the run could not be written or read.", Path(exc.filename or run_dir),
                               exc, "free disk space (or raise the file size limit) and continue the run with "
                               f"torchwise train --out {run_dir} --resume (from its newest checkpoint)") from exc
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _train_in(config, run_dir: Path, staging: Path | None, dist_env, log, on_trainer) -> dict[str, Any]:
    # Over 60 lines: the run's stages in their one order (data, files, model, Trainer, fit, evaluation,
    # report), each depending on the ones before; split up, the order would no longer read at once.
    import torch

    from torchwise.data.stats import STATS_FILE
    from torchwise.data.tasks import SPLIT_FILE, prepare_task
    from torchwise.models import build_model
    from torchwise.train.distributed import barrier
    from torchwise.train.reproducibility import seed_everything

    main = dist_env.is_main
    started = time.perf_counter()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    config = _with_absolute_paths(config)
    if main:
        if (run_dir / STATS_FILE).is_file():  # the cached normalization statistics: not computed again
            shutil.copyfile(run_dir / STATS_FILE, staging / STATS_FILE)
        task = prepare_task(config, staging, progress=_progress_enabled(config.output.progress), log=log)
    barrier(dist_env)
    if not main:
        task = prepare_task(config, None)
    _log_data(task, log)
    _log_loss(config, task, log)
    meta = {**task.meta(), "data_path": str(Path(config.data.path).resolve())}
    if main:
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        # `resume` is what this invocation does, not a property of the run: a saved `resume: true`
        # would make `--config RUN/config.yaml` fail for a new run.
        dataclasses.replace(config, train=dataclasses.replace(config.train, resume=False)).save(staging / "config.yaml")
        if config.train.resume:
            _check_same_data(run_dir, {name: json.loads((staging / name).read_text())
                                       for name in (SPLIT_FILE, "meta.json") if (staging / name).is_file()},
                             config.data.path)

    # The weights are initialized here, before the Trainer seeds anything: seed now, or the same
    # --seed would give a different model on every run. A resumed run takes its checkpoint's weights,
    # so its starting weights file is not read (it may be gone by now).
    seed_everything(config.train.seed)
    model = build_model(**task.model_kwargs, weights=None if config.train.resume else config.model.weights)
    trainer = _make_trainer(config, task, model, run_dir, meta)
    if main:
        trainer.events.on("fit_start", lambda **_: _publish(staging, run_dir))
    if on_trainer is not None:
        on_trainer(trainer)
    # On Ctrl-C the Trainer saves a checkpoint and prints how to resume: the command, not the Python call.
    trainer.interrupt_hint = _resume_command(config)
    fit_started = time.perf_counter()
    try:
        result = trainer.fit()
    except KeyboardInterrupt as exc:
        exc.resume_said = True  # type: ignore[attr-defined]  (run() then does not say it twice)
        raise
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


# The CLI's train.* keys that are not Trainer settings: they build the optimizer, the loss and the process.
CLI_ONLY = frozenset({"lr", "weight_decay", "optimizer", "class_weights", "threads"})


def trainer_settings(config, run_dir: Path | None = None) -> dict[str, Any]:
    """The Trainer's settings from a RunConfig: every train.* key is the Trainer setting of the same name
    (or in CLI_ONLY); the data loader's workers, the progress bars and the run directory come from the
    data and output sections; the whole RunConfig is recorded with the run."""
    from torchwise.train.settings import FLAT

    t = config.train
    shared = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name in FLAT}
    return {**shared, "num_workers": config.data.num_workers, "progress": config.output.progress,
            "out_dir": run_dir if run_dir is not None else config.output.dir, "run_config": config.to_dict()}


def _make_trainer(config, task, model, run_dir: Path, meta: dict[str, Any]):
    from torchwise.train.trainer import Trainer

    return Trainer(model, optimizer=_optimizer_factory(config.train), loss=task.loss(), train_data=task.train,
                   val_data=task.val, task=task.problem, metadata=meta, batch_augment=task.batch_augment,
                   batch_eval=task.batch_eval, **trainer_settings(config, run_dir))


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
    except KeyboardInterrupt as exc:
        if not getattr(exc, "resume_said", False):  # interrupted before training (data scan, set-up)
            _say_how_to_resume(config)
        raise  # the CLI's own answer to Ctrl-C: exit status 130
    finally:
        leave(together=succeeded)  # under torchrun: every rank leaves the group before the interpreter ends
    return 0


def _resume_command(config) -> str:
    import shlex

    return f"torchwise train --out {shlex.quote(str(config.output.dir))} --resume"


def _say_how_to_resume(config) -> None:
    """After Ctrl-C: the exact command that continues the run, when it has a checkpoint to continue from."""
    from torchwise.train import checkpoint as ckpt

    if config.output.dir and os.environ.get("RANK", "0") == "0":
        found = ckpt.list_checkpoints(Path(config.output.dir) / "checkpoints")
        if found:
            print(f"torchwise train: interrupted; {found[-1].name} is saved. Continue with:\n"
                  f"  {_resume_command(config)}", file=sys.stderr)
