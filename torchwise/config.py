"""Typed run configuration for `torchwise train` (and everything that reads a run back).

One resolved `RunConfig` comes from four layers, later ones winning:

    defaults  <  YAML file (--config)  <  plain flags (--lr 0.01)  <  --set section.key=value

Every layer goes through the same validation, so a typo or a bad value is rejected the same
way wherever it came from: the key, the value, the allowed values and a did-you-mean. The
resolved config is saved as config.yaml in the run directory and is the only thing `--resume`
and `eval` need to rebuild the data pipeline exactly.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Union

from torchwise import safe_yaml  # light: it imports yaml only when it reads
from torchwise.errors import ConfigError
from torchwise.files import write_text

AUTO = "auto"


def _opt(default: Any, help: str, **limits: Any) -> Any:
    """A dataclass field with its help text and numeric limits (min/max, inclusive unless *_open)."""
    return field(default=default, metadata={"help": help, **limits})


@dataclass(kw_only=True)
class DataConfig:
    path: str | None = _opt(None, "image folder (class folders, or train/ and val/) or a CSV file")
    target: str | None = _opt(None, "CSV only: the column to predict")
    problem: Literal["auto", "classification", "regression"] = _opt(
        "auto", "CSV only: auto-detected from the target column unless set")
    val_fraction: float = _opt(0.2, "share of each class held out when there is no val/ folder", min=0.0, max=1.0,
                               min_open=True, max_open=True)
    image_size: int | None = _opt(None, "side of the square model input; none: 224 for torchvision "
                                        "models, the images' median side (at most 64) for smallcnn/mlp", min=4)
    channels: Literal["auto", "gray", "rgb"] = _opt("auto", "auto: gray when every image is grayscale")
    crop_scale: float | Literal["auto"] = _opt(
        AUTO, "smallest area share kept by the random resized crop (1: no crop); auto: 0.35, or 0.8 for "
              "images under 32 pixels (a third of a tiny image rarely holds the object)", min=0.01, max=1.0)
    hflip: bool | Literal["auto"] = _opt(
        AUTO, "random horizontal flips when training; auto: on for colour images, off when every image is gray "
              "whatever its file stores (digits, letters, documents, scans: a mirrored one is another thing)")
    center_crop: float | Literal["auto"] = _opt(
        AUTO, "val: resize to size/center_crop, then crop the center (1: no crop); auto: 0.875, or 1 for "
              "images under 32 pixels (they are the object, tightly framed)", min=0.1, max=1.0)
    missing: Literal["drop", "impute"] = _opt(
        "drop", "CSV rows with missing feature values: drop them, or impute (mean / '<missing>')")
    decimal: Literal["auto", "point", "comma"] = _opt(
        "auto", "CSV: the decimal mark of number columns; auto: decided per column from values that show it "
                "(3,14 or 1,234.5), else a comma in a semicolon-separated file and a point otherwise (said)")
    max_categories: int = _opt(50, "CSV: most frequent categories one-hot encoded per column", min=1)
    num_workers: int | Literal["auto", "tune"] = _opt(AUTO, "DataLoader worker processes; tune: measure a few "
                                                              "counts and take the fastest", min=0)
    cache: Literal["auto", "memory", "disk", "off"] = _opt(
        "auto", "images: decode and shrink each image once (shorter side to image_size/center_crop, never "
                "enlarged) and train from that copy: memory, disk (a file in data.cache_dir that worker "
                "processes map), or off (decode every file every epoch); auto: memory up to 2 GiB (at most a "
                "quarter of the free RAM), else disk up to 16 GiB (at most half the free space), else off")
    cache_dir: str | None = _opt(None, "folder of data.cache=disk (none: $TORCHWISE_CACHE_DIR, else "
                                       "~/.cache/torchwise/images); one subfolder per data set and input size")
    augment_policy: Literal["none", "trivial", "randaugment"] = _opt(
        "none", "images: an automatic augmentation policy after the crop and flip, in the loader: trivial "
                "(TrivialAugmentWide) or randaugment (RandAugment, 2 ops of magnitude 9)")
    augment_on: Literal["cpu", "device"] = _opt(
        "cpu", "images: where training augmentation runs: cpu (image by image in the loader) or device "
               "(whole batches on the training device after the copy: the loader only cuts a fixed square; "
               "random resized crop, flips and normalization then run as a few batched tensor operations)")

    def __post_init__(self) -> None:
        _validate_section(self)


@dataclass(kw_only=True)
class ModelConfig:
    name: str = _opt("auto", "auto (smallcnn for images, mlp for CSV), smallcnn, mlp, a torchvision "
                             "architecture (resnet18, ...), timm:NAME (e.g. timm:convnext_atto) or pkg.module:callable")
    weights: str | None = _opt(None, "LOCAL state dict file to start from (nothing is downloaded)")
    freeze_backbone: bool = _opt(False, "train only the new classification head")

    def __post_init__(self) -> None:
        _validate_section(self)


@dataclass(kw_only=True)
class TrainConfig:
    epochs: int = _opt(10, "passes over the training set", min=1)
    max_steps: int | None = _opt(None, "stop after this many optimizer steps", min=1)
    batch_size: int = _opt(64, "samples per optimizer step", min=1)
    eval_batch_size: int | None = _opt(None, "samples per validation/evaluation batch (no gradients, so it can be "
                                             "larger); none: train.batch_size", min=1)
    lr: float = _opt(1e-3, "peak learning rate", min=0.0, min_open=True)
    weight_decay: float = _opt(0.01, "AdamW / SGD weight decay", min=0.0)
    optimizer: Literal["adamw", "sgd"] = _opt("adamw", "optimizer")
    scheduler: Literal["none", "onecycle", "cosine", "step", "plateau"] = _opt("cosine", "learning-rate schedule")
    warmup_steps: int = _opt(0, "linear warm-up steps", min=0)
    extend_schedule: Literal["none", "restart", "keep_end"] = _opt(
        "none", "a resumed, longer run's onecycle/cosine schedule: restart it there, or keep_end (its last lr holds)")
    accumulate: int = _opt(1, "micro-batches per optimizer step", min=1)
    class_weights: Literal["none", "balanced"] = _opt(
        "none", "classification: weight the loss per class from the TRAINING split's counts; balanced: "
                "n / (classes * count of the class), so rare classes count more (the weights are in meta.json)")
    clip_grad_norm: float | None = _opt(None, "clip the gradient norm to this value", min=0.0, min_open=True)
    early_stopping: int | None = _opt(None, "stop after this many evaluations without val_loss improving", min=1)
    seed: int = _opt(0, "seed for the split, the augmentations and the weights", min=0)
    deterministic: bool = _opt(False, "use deterministic kernels (slower)")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = _opt("auto", "numeric precision")
    device: str = _opt(AUTO, "auto, cpu, cuda, cuda:1, mps, ...")
    fast: str = _opt("auto", "speed switches: auto, off, or parts joined by commas from channels_last, tf32, "
                             "fused_optimizer, compile, prefetch, sync_free, cuda_graph")
    profile: int = _opt(0, "profile this many optimizer steps after a warm-up (0: off); trace in RUNDIR/profile/",
                        min=0)
    eval_every: int | None = _opt(None, "validate every N optimizer steps (default: at the end of each epoch)", min=1)
    on_oom: Literal["raise", "adapt"] = _opt("raise", "on out-of-memory: adapt = half micro-batch, double "
                                                      "accumulation, same result")
    strategy: Literal["auto", "ddp", "fsdp"] = _opt("auto", "with several processes: ddp replicates the model, "
                                                           "fsdp shards it (models too big for one device)")
    threads: int | None = _opt(None, "CPU threads for torch ops (none: torch's default); 1 is fastest for "
                                     "tiny models on a busy machine", min=1)
    checkpoint_every: int | None = _opt(None, "save a checkpoint every N optimizer steps", min=1)
    keep_last: int = _opt(2, "checkpoints kept", min=1)
    resume: bool = _opt(False, "continue the run in output.dir from its last complete checkpoint")
    label_smoothing: float = _opt(0.0, "classification: cross-entropy against smoothed labels (e.g. 0.1)", min=0.0,
                                  max=1.0, max_open=True)
    mixup: float = _opt(0.0, "images: MixUp of training batches, the alpha of Beta(alpha, alpha) (e.g. 0.8; 0: off)",
                        min=0.0)
    cutmix: float = _opt(0.0, "images: CutMix of training batches, its alpha (e.g. 1.0; 0: off); with mixup "
                              "too, each batch is one or the other", min=0.0)
    ema_decay: float | None = _opt(None, "an exponential moving average of the weights (e.g. 0.999), evaluated, "
                                         "kept as best and exported in place of the raw weights", min=0.0,
                                   max=1.0, min_open=True, max_open=True)
    gradient_checkpointing: bool = _opt(False, "recompute activations in backward: less memory, more compute")
    backbone_lr_scale: float = _opt(1.0, "learning rate of everything but the classification head, times this "
                                         "(0: the backbone is frozen)", min=0.0)
    loggers: str | None = _opt(None, "where metrics go, joined by commas from csv, tensorboard, mlflow (local "
                                     "file store), wandb (offline); none: csv,tensorboard")

    def __post_init__(self) -> None:
        _validate_section(self)


@dataclass(kw_only=True)
class OutputConfig:
    dir: str | None = _opt(None, "run directory")
    report: bool = _opt(True, "write report.html")
    worst_examples: int = _opt(16, "worst-classified validation examples shown in the report", min=0)
    progress: bool | Literal["auto"] = _opt(AUTO, "progress bars: auto shows them only on a terminal")

    def __post_init__(self) -> None:
        _validate_section(self)


@dataclass(kw_only=True)
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> Path:
        import yaml

        path = Path(path)
        # atomically: `--resume` and `eval` rebuild the run from this file, so a crash or a full disk
        # mid-write must leave the previous config.yaml, never half of one
        write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))
        return path


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}  # type: ignore[misc]

_SECTION_OF = {cls: name for name, cls in SECTIONS.items()}


def _validate_section(self: Any) -> None:
    """Dataclass __post_init__: a section built directly in Python is checked like one from YAML."""
    section = _SECTION_OF[type(self)]
    for f in dataclasses.fields(self):
        setattr(self, f.name, coerce_value(f"{section}.{f.name}", getattr(self, f.name)))


# Plain command-line flags and the config key each one sets (most flags are named as their key). The CLI
# defines them with default=None so that only flags the user actually typed override the YAML file.
FLAG_KEYS: dict[str, str] = {
    **{flag: f"data.{flag}" for flag in ("target", "problem", "decimal", "val_fraction", "image_size", "missing",
                                         "num_workers")},
    "data": "data.path", "model": "model.name", "out": "output.dir",
    **{flag: f"model.{flag}" for flag in ("weights", "freeze_backbone")},
    **{flag: f"train.{flag}" for flag in ("epochs", "max_steps", "batch_size", "lr", "seed", "precision", "device",
                                          "checkpoint_every", "profile", "fast", "resume", "extend_schedule")},
}


# ----------------------------------------------------------------------------- validation


def _did_you_mean(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return close[0] if close else None


def _bad_key(key: str, value: Any, allowed: list[str], part: str, guess: str | None = None) -> ConfigError:
    values: dict[str, Any] = {"key": key, "value": value, "allowed": ", ".join(allowed)}
    guess = guess or _did_you_mean(part, allowed)
    if guess:
        values["did you mean"] = guess
    return ConfigError(f"Unknown configuration key {key!r}.", values=values,
                       fix="use one of the allowed keys" + (f" (did you mean {guess!r}?)" if guess else ""))


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", "~", ""}


class _NoMatch(Exception):
    """The value is not of this type; args[0], when given, says why (for the error message)."""


def _number_text(value: str, integer: bool) -> int | float:
    """A number a person wrote as text ("1e-3", " 64 ", "1_000", "20%"): the same reader as CSV cells."""
    from torchwise.numbers import NumberTextError, read_number

    try:
        return read_number(value, integer=integer)
    except NumberTextError as exc:
        raise _NoMatch(str(exc)) from None


def _coerce_one(tp: Any, value: Any, from_text: bool) -> Any:
    """Convert `value` to the type `tp` or raise _NoMatch. A string means the same from a flag, --set or
    YAML (PyYAML reads `lr: 1e-3` as "1e-3"): numbers by torchwise.numbers, booleans from true/false,
    yes/no, on/off, 1/0, none from none/null/~ (`from_text` is kept for callers, and changes nothing)."""
    if tp is type(None):
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
            return None
        raise _NoMatch
    if typing.get_origin(tp) is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        if isinstance(value, (bool, str)):
            text = str(value).strip().lower()
            for choice in typing.get_args(tp):
                if str(choice).lower() == text:
                    return choice
        raise _NoMatch
    convert = _CONVERTERS.get(tp)
    if convert is None:
        raise TypeError(f"config field type {tp!r} is not supported")
    return convert(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise _NoMatch(f"{value!r} is not one of true/false, yes/no, on/off, 1/0")
    raise _NoMatch


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _NoMatch
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise _NoMatch(f"{value!r} is not a whole number" if math.isfinite(value) else f"{value!r} is not a finite number")
    if isinstance(value, str):
        return _number_text(value, integer=True)
    raise _NoMatch


def _to_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise _NoMatch(f"{value!r} is not a finite number")
        return float(value)
    if isinstance(value, str):
        return float(_number_text(value, integer=False))
    raise _NoMatch  # a bool is not a number here


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # a YAML `device: 0` or `target: 2020` means the text
    raise _NoMatch


_CONVERTERS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _coerce(tp: Any, value: Any, from_text: bool) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        options = list(typing.get_args(tp))
        # None first so that "none" is not taken as a string; str last so it does not swallow numbers.
        options.sort(key=lambda t: 0 if t is type(None) else (2 if t is str else 1))
        why = None
        for option in options:
            try:
                return _coerce_one(option, value, from_text)
            except _NoMatch as exc:
                why = why or (exc.args[0] if exc.args else None)
                continue
        raise _NoMatch(why) if why else _NoMatch
    return _coerce_one(tp, value, from_text)


def _check_limits(key: str, value: Any, meta: Mapping[str, Any], tp_name: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = meta.get("min"), meta.get("max")
    low_open, high_open = meta.get("min_open", False), meta.get("max_open", False)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high}"
        allowed = " and ".join(part for part in (lo, hi) if part)
        raise ConfigError(f"Configuration value out of range for {key!r}.",
                          values={"key": key, "value": value, "allowed": f"{tp_name} {allowed}"},
                          fix=f"set {key} to a value {allowed}")


def coerce_value(key: str, value: Any, *, from_text: bool = False) -> Any:
    """Validate and convert one value for the dotted `key` ("train.lr"); raise ConfigError."""
    section, _, name = key.partition(".")
    if section not in SECTIONS:
        guess = _did_you_mean(section, list(SECTIONS))
        if guess and name in {f.name for f in dataclasses.fields(SECTIONS[guess])}:
            raise _bad_key(key, value, [f"{s}.*" for s in SECTIONS], section, guess=f"{guess}.{name}")
        raise _bad_key(key, value, [f"{s}.*" for s in SECTIONS], section)
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[section])}
    if name not in fields:
        raise _bad_key(key, value, [f"{section}.{n}" for n in fields], f"{section}.{name}")
    f = fields[name]
    tp = typing.get_type_hints(SECTIONS[section])[name]
    try:
        converted = _coerce(tp, value, from_text)
    except _NoMatch as exc:
        allowed = _type_name(tp)
        values: dict[str, Any] = {"key": key, "value": value, "allowed": allowed}
        if exc.args and exc.args[0]:
            values["why"] = exc.args[0]
        literals = [a for option in (typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType)
                                     else (tp,)) if typing.get_origin(option) is Literal
                    for a in typing.get_args(option)]
        if literals and isinstance(value, str):
            guess = _did_you_mean(value, [str(a) for a in literals])
            if guess:
                values["did you mean"] = guess
        raise ConfigError(f"Bad configuration value for {key!r}.", values=values,
                          fix=f"{key}: {f.metadata.get('help', '')}; allowed: {allowed}") from None
    _check_limits(key, converted, f.metadata, _type_name(tp))
    return converted


# ----------------------------------------------------------------------------- building


def _set(tree: dict[str, dict[str, Any]], key: str, value: Any, *, from_text: bool) -> None:
    converted = coerce_value(key, value, from_text=from_text)
    section, _, name = key.partition(".")
    tree[section][name] = converted


def from_dict(data: Mapping[str, Any] | None, base: RunConfig | None = None) -> RunConfig:
    """A RunConfig from a nested mapping (a YAML file's content) on top of `base` (or the defaults)."""
    tree = (base or RunConfig()).to_dict()
    for section, values in (data or {}).items():
        if section not in SECTIONS:
            raise _bad_key(str(section), values, list(SECTIONS), str(section))
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"Configuration section {section!r} must be a mapping of keys to values.",
                              values={"section": section, "value": values},
                              fix=f"write it as `{section}:` followed by indented `key: value` lines")
        for name, value in values.items():
            _set(tree, f"{section}.{name}", value, from_text=False)
    return _build(tree)


def _build(tree: dict[str, dict[str, Any]]) -> RunConfig:
    return RunConfig(**{name: cls(**tree[name]) for name, cls in SECTIONS.items()})


def load_yaml(path: str | Path, base: RunConfig | None = None) -> RunConfig:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError("Configuration file not found.", values={"path": str(path)},
                          fix="pass the path of an existing YAML file to --config")
    try:
        data = safe_yaml.load(path.read_text(), source=str(path)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("Configuration file is not valid YAML.", values={"path": str(path), "error": str(exc)},
                          fix="fix the YAML syntax at the position shown") from None
    if not isinstance(data, Mapping):
        raise ConfigError("Configuration file must hold a mapping of sections.", values={"path": str(path)},
                          fix="start the file with sections such as `train:` and `data:`")
    return from_dict(data, base)


def apply_overrides(config: RunConfig, overrides: Mapping[str, Any] | None = None,
                    sets: list[str] | None = None) -> RunConfig:
    """Apply typed overrides {"train.lr": 0.01} (plain flags) then `--set key=value` strings."""
    tree = config.to_dict()
    for key, value in (overrides or {}).items():
        _set(tree, key, value, from_text=isinstance(value, str))
    for item in sets or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("A --set override must look like section.key=value.", values={"got": item},
                              fix="for example: --set train.lr=0.01")
        _set(tree, key.strip(), text, from_text=True)
    return _build(tree)


def resolve(*, config_file: str | Path | None = None, base: RunConfig | None = None,
            flags: Mapping[str, Any] | None = None, sets: list[str] | None = None) -> RunConfig:
    """The resolved config: base or defaults < YAML file < flags (argparse dests) < --set."""
    config = base or RunConfig()
    if config_file:
        config = load_yaml(config_file, config)
    overrides = {FLAG_KEYS[dest]: value for dest, value in (flags or {}).items()
                 if dest in FLAG_KEYS and value is not None}
    return check_consistency(apply_overrides(config, overrides, sets))


def check_consistency(config: RunConfig) -> RunConfig:
    """Keys that contradict each other, checked once every layer is applied (a later layer may fix an
    earlier one). A regression detected from the CSV (problem=auto) is refused the same way once the
    data is read (torchwise.data.tasks)."""
    if config.train.class_weights != "none" and config.data.problem == "regression":
        raise ConfigError("train.class_weights is for classification, but data.problem is regression.",
                          values={"train.class_weights": config.train.class_weights,
                                  "data.problem": config.data.problem},
                          fix="drop train.class_weights (or set it to none); class weights apply to the "
                              "cross-entropy loss of class labels")
    return config


def describe() -> str:
    """Every key, its type, default and help: for `--set` users and the docs."""
    lines = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            lines.append(f"{section}.{f.name} ({_type_name(hints[f.name])}, default {f.default!r}): "
                         f"{f.metadata.get('help', '')}")
    return "\n".join(lines)
