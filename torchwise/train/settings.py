"""The Trainer's settings: one typed tree, grouped by concern, validated on construction.

    TrainerConfig(loop=LoopSettings(epochs=3, batch_size=32), eval=EvalSettings(monitor="val_acc"))
    config.batch_size                                                     # a setting by its flat name
    Trainer(model, opt, train_data=..., epochs=3, batch_size=32)        # the same, by flat names

Every setting has one name, the same in Python and in the CLI's config (train.epochs, train.batch_size,
...). A flat name (`batch_size=32`) finds its place in the tree; an old name (`max_epochs=`) is mapped
to the new one (ALIASES, listed in docs/CONTRACTS.md); an unknown one is refused with a did-you-mean.
Values are checked the way torchwise.config checks the CLI's: the value, what is allowed, a fix.

The resolved tree (`TrainerConfig.to_dict()`) is what a checkpoint records as the run's config, and
what `RUN/trainer_config.json` holds, whichever door (Python or the CLI) started the run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from torchwise.errors import ConfigError
from torchwise.train.distributed.process_group import STRATEGIES
from torchwise.train.input_checks import did_you_mean, is_int
from torchwise.train.step.precision import PRECISIONS

TASKS = ("classification", "regression")

# old Python keyword -> its one name now (the CLI's word); accepted and mapped
ALIASES = {"max_epochs": "epochs"}


def _opt(default: Any, help: str) -> Any:
    """A setting with its default and its help text (docs/guide.md's Trainer table is generated from it)."""
    return field(default=default, metadata={"help": help})


def _require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)


def _int_at_least(section: Any, names: Iterable[str], low: int, optional: bool = False) -> None:
    for name in names:
        value = getattr(section, name)
        if optional:
            _require(value is None or (is_int(value) and value >= low), f"{name} must be None or an integer >= {low}.",
                     {name: value}, f"Pass {name}=None or a positive number of optimizer steps.")
        else:
            _require(is_int(value) and value >= low, f"{name} must be an integer >= {low}.", {name: value},
                     f"Pass e.g. {name}={max(low, 1)}.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _non_negative(section: Any, names: Iterable[str], fix: str) -> None:
    for name in names:
        value = getattr(section, name)
        _require(_is_number(value) and value >= 0, f"{name} must be a number >= 0.", {name: value}, fix)


def _callable_or_none(name: str, fn: Any, fix: str) -> None:
    _require(fn is None or callable(fn), f"{name} must be a callable.", {name: type(fn).__name__}, fix)


@dataclass(kw_only=True)
class LoopSettings:
    """What the loop does: the task, its length, the batch, the seed, skipped steps."""
    task: str = _opt("classification", "classification (cross-entropy, accuracy) or regression (MSE, MAE)")
    epochs: int = _opt(1, "passes over the training data (max_steps wins when given)")
    max_steps: int | None = _opt(None, "stop after this many optimizer steps")
    batch_size: int = _opt(32, "samples per micro-batch")
    accumulate: int = _opt(1, "micro-batches per optimizer step (gradient accumulation)")
    seed: int = _opt(0, "the run's seed: python, numpy, torch, CUDA and the data order")
    deterministic: bool | None = _opt(None, "True: reproducible kernels (slower); False: fast ones; None: as "
                                            "this process already has it")
    max_consecutive_skips: int = _opt(10, "stop when this many optimizer steps in a row were skipped "
                                          "(a non-finite loss or gradient)")
    on_oom: str = _opt("raise", "on out-of-memory: raise (stop with the remedies) or adapt (half the "
                                "micro-batch, double the accumulation: same result)")

    def __post_init__(self) -> None:
        _require(self.task in TASKS, "Unknown task.", {"task": self.task, "allowed": ", ".join(TASKS),
                                                       "did you mean": did_you_mean(str(self.task).lower(), TASKS)},
                 "Pick one of the allowed.")
        _int_at_least(self, ("epochs", "batch_size", "accumulate", "max_consecutive_skips"), 1)
        _int_at_least(self, ("seed",), 0)
        _int_at_least(self, ("max_steps",), 1, optional=True)
        _require(self.deterministic in (None, True, False), "deterministic must be None, True or False.",
                 {"deterministic": self.deterministic},
                 "True: reproducible kernels; False: fast ones; None (default): as this process already has it.")
        _require(self.on_oom in ("raise", "adapt"), "on_oom must be 'raise' or 'adapt'.", {"on_oom": self.on_oom},
                 "'adapt' halves the micro-batch and doubles accumulation on out-of-memory (same results); "
                 "'raise' stops with the remedies.")


@dataclass(kw_only=True)
class DataSettings:
    """How batches are loaded and prepared on the device."""
    num_workers: int | str = _opt("auto", "DataLoader worker processes: a number, auto (0 on the CPU) or tune "
                                          "(measure a few counts and take the fastest)")
    # whole batches on the device after the copy (torchwise.data.device_augment)
    batch_augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = _opt(
        None, "fn(inputs, generator) applied to whole training batches on the device (e.g. BatchAugment)")
    batch_eval: Callable[[torch.Tensor], torch.Tensor] | None = _opt(
        None, "fn(inputs) applied to validation batches on the device (e.g. BatchEval)")
    mixup: float = _opt(0.0, "MixUp of training batches, the alpha of Beta(alpha, alpha) (0: off; usual: 0.8); "
                             "never in validation")
    cutmix: float = _opt(0.0, "CutMix of training batches, its alpha (0: off; usual: 1.0); with mixup too, each "
                              "batch is one or the other")

    def __post_init__(self) -> None:
        n = self.num_workers
        _require(n in ("auto", "tune") or (is_int(n) and n >= 0),
                 "num_workers must be 'auto', 'tune' or an integer >= 0.", {"num_workers": n},
                 "Pass num_workers='auto' (0 on the CPU) or e.g. num_workers=4.")
        for name in ("batch_augment", "batch_eval"):
            _callable_or_none(name, getattr(self, name), "Pass e.g. torchwise.data.device_augment.BatchAugment("
                                                         "size=32) (and BatchEval for batch_eval).")
        _non_negative(self, ("mixup", "cutmix"), "A usual value is mixup=0.8 or cutmix=1.0; 0 turns it off.")


@dataclass(kw_only=True)
class OptimSettings:
    """The update and its learning-rate schedule (the optimizer itself is Trainer's optimizer=)."""
    clip_grad_norm: float | None = _opt(None, "clip the gradient norm to this value (None: no clipping)")
    scheduler: Any = _opt(None, "learning-rate schedule: None, onecycle, cosine, step, plateau, or "
                                "fn(optimizer, total_steps) -> a torch scheduler")
    scheduler_interval: str | None = _opt(None, "when your own scheduler steps: step, epoch or plateau (None: "
                                                "plateau for a ReduceLROnPlateau, else every step)")
    warmup_steps: int = _opt(0, "linear warm-up steps (cosine schedule)")
    # a run resumed longer than its onecycle/cosine schedule was laid out for (recipes/schedule.py)
    extend_schedule: str | None = _opt(None, "a resumed run made longer than its onecycle/cosine schedule was laid "
                                             "out for: None refuses and shows the choices, restart lays the schedule "
                                             "out again from there, keep_end holds its last value")
    label_smoothing: float = _opt(0.0, "label smoothing of the default CrossEntropyLoss (a loss= of yours keeps "
                                       "its own)")
    ema_decay: float | None = _opt(None, "an exponential moving average of the weights (e.g. 0.999): evaluated, "
                                         "saved as best/final and exported in place of the raw weights")
    backbone_lr_scale: float = _opt(1.0, "the learning rate of every parameter but the head's, times this "
                                         "(0: the backbone is frozen)")

    def __post_init__(self) -> None:
        c = self.clip_grad_norm
        _require(c is None or (isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0),
                 "clip_grad_norm must be None or a positive number.", {"clip_grad_norm": c}, "A typical value is 1.0.")
        _int_at_least(self, ("warmup_steps",), 0)
        _require(self.extend_schedule in (None, "none", "restart", "keep_end"), "Unknown extend_schedule.",
                 {"extend_schedule": self.extend_schedule, "allowed": "None, 'restart', 'keep_end'",
                  "did you mean": did_you_mean(str(self.extend_schedule), ("restart", "keep_end"))},
                 "'restart': a resumed, longer run lays its onecycle/cosine schedule out again from where it resumes; "
                 "'keep_end': the schedule ends as planned and its last value holds; None: such a resume is refused.")
        if self.extend_schedule == "none":  # the CLI's word for not set
            self.extend_schedule = None
        ls = self.label_smoothing
        _require(_is_number(ls) and 0.0 <= ls < 1.0, "label_smoothing must be a number in [0, 1).",
                 {"label_smoothing": ls}, "A usual value is 0.1; 0 turns it off.")
        d = self.ema_decay
        _require(d is None or (_is_number(d) and 0.0 < d < 1.0), "ema_decay must be None or a number in (0, 1).",
                 {"ema_decay": d}, "A usual value is 0.999 (about the last 1,000 steps); None turns it off.")
        b = self.backbone_lr_scale
        _require(_is_number(b) and b >= 0, "backbone_lr_scale must be a number >= 0.", {"backbone_lr_scale": b},
                 "Use e.g. 0.1 (the backbone learns 10x slower than the head), 0 to freeze it, 1 for one rate.")
        if self.scheduler == "none":  # the CLI's word for no schedule
            self.scheduler = None


@dataclass(kw_only=True)
class DeviceSettings:
    device: str | torch.device = _opt("auto", "auto (the GPU when there is one), cpu, cuda, cuda:1, mps, or a "
                                              "torch.device")
    precision: str = _opt("auto", "auto (the best the device does well), fp32, bf16 or fp16")

    def __post_init__(self) -> None:
        _require(isinstance(self.device, (str, torch.device)), "device must be a string or a torch.device.",
                 {"device": repr(self.device)}, "Pass device='auto', 'cpu', 'cuda' or 'cuda:1'.")
        _require(self.precision in PRECISIONS, "Unknown precision.",
                 {"precision": self.precision, "allowed": ", ".join(PRECISIONS),
                  "did you mean": did_you_mean(str(self.precision), PRECISIONS)},
                 "Use one of the allowed values ('auto' picks the best for the device).")


@dataclass(kw_only=True)
class EvalSettings:
    """Validation, and the one monitored metric (best weights, early stopping, plateau schedule)."""
    eval_every: int | None = _opt(None, "validate every N optimizer steps (None: at the end of each epoch)")
    eval_batch_size: int | None = _opt(None, "samples per validation batch (None: batch_size)")
    monitor: str | None = _opt(None, "the metric that picks the best weights, early stopping and the plateau "
                                     "schedule (None: the EarlyStopping's, else val_loss)")
    mode: str | None = _opt(None, "min or max for the monitored metric (None: the EarlyStopping's, else from "
                                  "the metric's name)")
    min_delta: float | None = _opt(None, "the smallest change that counts as better (None: the EarlyStopping's, "
                                         "else 0.0)")
    early_stopping: Any = _opt(None, "a torchwise.EarlyStopping, a patience (an integer, as the CLI's), or None")

    def __post_init__(self) -> None:
        from torchwise.train.evaluate.early_stop import EarlyStopping

        _int_at_least(self, ("eval_every",), 1, optional=True)
        b = self.eval_batch_size
        _require(b is None or (type(b) is int and b >= 1), "eval_batch_size must be None or an integer >= 1.",
                 {"eval_batch_size": b}, "Pass e.g. eval_batch_size=256 (validation keeps no gradients, so it fits "
                                         "larger batches), or None to validate with batch_size.")
        d = self.min_delta
        _require(d is None or (isinstance(d, (int, float)) and not isinstance(d, bool) and d >= 0),
                 "min_delta must be None or a number >= 0.", {"min_delta": d},
                 "Pass min_delta=0.0 (any improvement counts) or a small positive number.")
        es = self.early_stopping
        if is_int(es) and es >= 1:
            self.early_stopping = EarlyStopping(patience=es)
        _require(self.early_stopping is None or isinstance(self.early_stopping, EarlyStopping),
                 "early_stopping must be a torchwise.EarlyStopping, a patience (an integer >= 1) or None.",
                 {"early_stopping": repr(es)[:100]}, "Pass early_stopping=torchwise.EarlyStopping(patience=5) "
                                                     "(or early_stopping=5).")


@dataclass(kw_only=True)
class CheckpointSettings:
    out_dir: str | Path | None = _opt(None, "the run directory (None: nothing is written)")
    checkpoint_every: int | None = _opt(None, "save a checkpoint every N optimizer steps (None: at the end of "
                                              "every epoch)")
    keep_last: int = _opt(2, "checkpoints kept (older ones are deleted)")
    resume: bool | str | Path = _opt(False, "True: continue from the newest complete checkpoint in out_dir; or a "
                                            "checkpoint's path")

    def __post_init__(self) -> None:
        _require(self.out_dir is None or isinstance(self.out_dir, (str, Path)), "out_dir must be a folder path.",
                 {"out_dir": repr(self.out_dir)[:100]}, "Pass out_dir='runs/my-run' (or None to write nothing).")
        _int_at_least(self, ("checkpoint_every",), 1, optional=True)
        _int_at_least(self, ("keep_last",), 1)
        _require(isinstance(self.resume, (bool, str, Path)), "resume must be True, False or a checkpoint path.",
                 {"resume": repr(self.resume)[:100]}, "Pass resume=True to continue the run in out_dir.")
        if self.out_dir is not None:
            self.out_dir = Path(self.out_dir)


@dataclass(kw_only=True)
class FastSettings:
    fast: Any = _opt("auto", "speed switches: auto, off, or parts (a list, or joined by commas) from "
                             "channels_last, tf32, fused_optimizer, compile, prefetch, sync_free, cuda_graph")
    compile_options: Mapping[str, Any] | None = _opt(None, "keyword arguments for torch.compile when fast "
                                                           "includes compile")
    gradient_checkpointing: bool = _opt(False, "recompute activations in backward: less memory, ~30% more "
                                               "compute")

    def __post_init__(self) -> None:
        if isinstance(self.fast, str) and self.fast not in ("auto", "off"):
            self.fast = [part.strip() for part in self.fast.split(",") if part.strip()]
        _require(self.compile_options is None or isinstance(self.compile_options, Mapping),
                 "compile_options must be a dict or None.", {"compile_options": type(self.compile_options).__name__},
                 "Pass compile_options={...} or leave it out.")
        self.compile_options = dict(self.compile_options or {})


@dataclass(kw_only=True)
class DistributedSettings:
    strategy: str = _opt("auto", "with several processes (torchrun): ddp replicates the model, fsdp shards it")
    dist_timeout_s: float = _opt(300.0, "seconds the processes wait for each other before giving up")

    def __post_init__(self) -> None:
        _require(self.strategy in STRATEGIES, "Unknown strategy.",
                 {"strategy": self.strategy, "allowed": ", ".join(STRATEGIES),
                  "did you mean": did_you_mean(str(self.strategy), STRATEGIES)},
                 "'ddp' replicates the model on every rank; 'fsdp' shards it (for models too big for one device).")
        t = self.dist_timeout_s
        _require(isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0,
                 "dist_timeout_s must be a positive number of seconds.", {"dist_timeout_s": t}, "Pass e.g. 300.")


@dataclass(kw_only=True)
class CheckSettings:
    checks: bool = _opt(True, "watch the run with torchwise check's detectors (findings in the console and "
                              "the report)")
    profile: bool | int = _opt(False, "profile optimizer steps after a warm-up: True (5 steps) or a number")

    def __post_init__(self) -> None:
        _require(isinstance(self.checks, bool), "checks must be True or False.", {"checks": self.checks},
                 "checks=True watches the run with torchwise check's detectors.")
        _require(isinstance(self.profile, (bool, int)) and self.profile >= 0,
                 "profile must be False, True or a number of steps.", {"profile": self.profile},
                 "Pass profile=True (5 steps after a warm-up) or e.g. profile=10.")


@dataclass(kw_only=True)
class LoggingSettings:
    progress: bool | str = _opt("auto", "auto: a bar on a terminal, one line per epoch elsewhere; True; False")
    log_every: int = _opt(10, "log loss, learning rate and gradient norm every N optimizer steps")
    tensorboard: bool = _opt(True, "write TensorBoard event files (tb/) when loggers is None")
    loggers: Any = _opt(None, "where metrics go: names from csv, tensorboard, mlflow, wandb, or logger objects "
                              "of your own (None: csv and tensorboard)")
    metadata: Mapping[str, Any] | None = _opt(None, "a dict of your own, written to final/meta.json")
    run_config: Mapping[str, Any] | None = _opt(None, "the launcher's own config (the CLI's), recorded with the "
                                                      "run")

    def __post_init__(self) -> None:
        _require(self.progress in ("auto", True, False), "progress must be 'auto', True or False.",
                 {"progress": self.progress}, "'auto' shows a bar on a terminal and one line per epoch elsewhere.")
        _int_at_least(self, ("log_every",), 1)
        for name in ("metadata", "run_config"):
            value = getattr(self, name)
            _require(value is None or isinstance(value, Mapping), f"{name} must be a dict or None.",
                     {name: type(value).__name__}, f"Pass {name}={{...}} or leave it out.")
            setattr(self, name, dict(value or {}))
        from torchwise.train.loggers.choice import check_loggers

        check_loggers(self.loggers, tensorboard=self.tensorboard)  # a misspelt name is refused at Trainer(...)


@dataclass(kw_only=True)
class TrainerConfig:
    loop: LoopSettings = field(default_factory=LoopSettings)
    data: DataSettings = field(default_factory=DataSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    hardware: DeviceSettings = field(default_factory=DeviceSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    speed: FastSettings = field(default_factory=FastSettings)
    distributed: DistributedSettings = field(default_factory=DistributedSettings)
    watch: CheckSettings = field(default_factory=CheckSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _require(isinstance(getattr(self, f.name), SECTIONS[f.name]), f"config.{f.name} must be a "
                     f"{SECTIONS[f.name].__name__}.", {f.name: type(getattr(self, f.name)).__name__},
                     f"Pass {f.name}={SECTIONS[f.name].__name__}(...), or the settings by name.")

    def __getattr__(self, name: str) -> Any:
        """A setting by its flat name: config.batch_size is config.loop.batch_size."""
        section = FLAT.get(ALIASES.get(name, name))
        if section is None:
            raise AttributeError(f"TrainerConfig has no setting {name!r}")
        return getattr(object.__getattribute__(self, section), ALIASES.get(name, name))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The resolved tree as plain JSON-able values (a callable or an object by its type's name)."""
        return {f.name: {g.name: _plain(getattr(getattr(self, f.name), g.name))
                         for g in dataclasses.fields(getattr(self, f.name))} for f in dataclasses.fields(self)}

    def replace(self, **settings: Any) -> "TrainerConfig":
        """A copy with some settings changed, by flat name (checked like the constructor's)."""
        return build_config(self, settings)


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(TrainerConfig)}  # type: ignore
FLAT: dict[str, str] = {g.name: name for name, cls in SECTIONS.items() for g in dataclasses.fields(cls)}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (Path, torch.device)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in (sorted(value) if isinstance(value, (set, frozenset)) else value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{f.name: _plain(getattr(value, f.name))
                                                 for f in dataclasses.fields(value)}}
    kind = getattr(value, "__qualname__", None) or type(value).__qualname__
    return {"type": f"{getattr(value, '__module__', type(value).__module__)}.{kind}"}


def unknown_setting(name: str) -> ConfigError:
    names = sorted(set(FLAT) | set(ALIASES))
    guess = did_you_mean(name, names)
    return ConfigError(f"Unknown Trainer setting {name!r}.",
                       values={"setting": name, "did you mean": guess, "sections": ", ".join(SECTIONS)},
                       fix="Use one of the settings listed in torchwise.train.settings (a flat name such as "
                           "batch_size=32 goes to its section)" + (f"; did you mean {guess!r}?" if guess != "-" else "."))


def build_config(base: Any = None, settings: Mapping[str, Any] | None = None) -> TrainerConfig:
    """The resolved tree: `base` (a TrainerConfig, or a dict of settings by flat name or by section)
    with `settings` (flat names, old names mapped) on top. Each section is validated as it is built."""
    if base is not None and not isinstance(base, (TrainerConfig, Mapping)):
        raise ConfigError("config must be a dict of settings or a torchwise.TrainerConfig.",
                          values={"config": type(base).__name__},
                          fix="Pass config=TrainerConfig(...) or config={'batch_size': 32, ...}, or the settings "
                              "by name: Trainer(..., batch_size=32).")
    tree: dict[str, dict[str, Any]] = {}
    if isinstance(base, TrainerConfig):
        tree = {name: {g.name: getattr(getattr(base, name), g.name) for g in dataclasses.fields(cls)}
                for name, cls in SECTIONS.items()}
    flat: dict[str, Any] = {}
    for key, value in (base.items() if isinstance(base, Mapping) else ()):
        if key in SECTIONS and isinstance(value, Mapping):  # {"loop": {"epochs": 3}}
            for name, inner in value.items():
                if FLAT.get(ALIASES.get(name, name)) != key:
                    raise unknown_setting(f"{key}.{name}")
                flat[name] = inner
        else:
            flat[key] = value
    flat.update(settings or {})
    shown: dict[str, str] = {}  # the new name -> the old one the caller used (errors name what was typed)
    for name, value in flat.items():
        canonical = ALIASES.get(name, name)
        if canonical not in FLAT:
            raise unknown_setting(name)
        if canonical != name:
            _require(canonical not in flat, f"{name} is the old name of {canonical}: give one of the two.",
                     {name: value, canonical: flat.get(canonical)}, f"Pass {canonical}= only.")
            shown[canonical] = name
        tree.setdefault(FLAT[canonical], {})[canonical] = value
    sections = {}
    for name, cls in SECTIONS.items():
        try:
            sections[name] = cls(**tree.get(name, {}))
        except ConfigError as exc:
            raise _renamed(exc, shown) from None
    return TrainerConfig(**sections)


def _renamed(exc: ConfigError, shown: Mapping[str, str]) -> ConfigError:
    """The error about `epochs` says `max_epochs` when that is the name the caller typed."""
    for new, old in shown.items():
        if new in exc.values:
            return ConfigError(exc.what.replace(new, old, 1),
                               values={(old if k == new else k): v for k, v in exc.values.items()},
                               fix=(exc.fix or "").replace(f"{new}=", f"{old}="))
    return exc
