"""Search spaces: which config keys a search varies, and how.

A space is a YAML mapping from dotted config keys to a distribution:

    train.lr:           {type: loguniform, low: 1.0e-4, high: 1.0e-1}
    train.weight_decay: {type: uniform, low: 0.0, high: 0.1}
    train.batch_size:   {type: int, low: 16, high: 128, step: 16}      # log: true also works
    train.scheduler:    {type: categorical, choices: [cosine, onecycle]}
    model.name:         [smallcnn, mlp]                                 # a bare list is categorical

Keys may also be nested under their section (`train: {lr: {...}}`). Every key and every bound or
choice goes through torchwise.config's own validation, so a typo gets the same "allowed keys /
did you mean" answer as in a run config, and a sampled value can never be one `train` refuses.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Union

from torchwise.errors import ConfigError

KINDS = ("loguniform", "uniform", "int", "categorical")
_ALIASES = {"log-uniform": "loguniform", "log_uniform": "loguniform", "float": "uniform",
            "integer": "int", "choice": "categorical"}
_FIELDS = {"loguniform": {"type", "low", "high"}, "uniform": {"type", "low", "high", "step"},
           "int": {"type", "low", "high", "step", "log"}, "categorical": {"type", "choices"}}
# A search cannot vary these: every trial has its own run directory, starts fresh and is quiet.
_NOT_SEARCHABLE = {"output.dir": "each trial gets its own run directory under the study directory",
                   "train.resume": "each trial is a fresh run; an interrupted search resumes by itself",
                   "output.progress": "trials run without progress bars"}


@dataclass(frozen=True)
class Param:
    key: str                      # "train.lr"; also the parameter's name in the Optuna study
    kind: str                     # one of KINDS
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"type": self.kind, "choices": list(self.choices)}
        out: dict[str, Any] = {"type": self.kind, "low": self.low, "high": self.high}
        if self.step is not None:
            out["step"] = self.step
        if self.kind == "int" and self.log:
            out["log"] = True
        return out

    def suggest(self, trial: Any) -> Any:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), step=self.step,
                                   log=self.kind == "loguniform")


def load_space(source: str | Path | Mapping[str, Any]) -> list[Param]:
    """Parse and validate a space from a YAML file path or an already-loaded mapping."""
    if isinstance(source, Mapping):
        data: Any = source
        where = "space"
    else:
        import yaml

        from torchwise import safe_yaml

        path = Path(source)
        if not path.is_file():
            raise ConfigError("Search space file not found.", values={"path": str(path)},
                              fix="pass the path of a YAML file to --space, e.g. `train.lr: {type: loguniform, "
                                  "low: 1.0e-4, high: 1.0e-1}`")
        try:
            data = safe_yaml.load(path.read_text(), source=str(path))
        except yaml.YAMLError as exc:
            raise ConfigError("Search space file is not valid YAML.", values={"path": str(path), "error": str(exc)},
                              fix="fix the YAML syntax at the position shown") from None
        where = str(path)
    if not isinstance(data, Mapping) or not data:
        raise ConfigError("A search space must be a non-empty mapping of config keys to distributions.",
                          values={"space": where, "got": data},
                          fix="write one line per key, e.g. `train.lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}`")
    params = [_parse(key, spec) for key, spec in _flatten(data)]
    return params


def _flatten(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    from torchwise.config import SECTIONS

    items: list[tuple[str, Any]] = []
    for key, spec in data.items():
        key = str(key)
        # `train: {lr: {...}, batch_size: [...]}` is the same as `train.lr: ...`
        if "." not in key and key in SECTIONS and isinstance(spec, Mapping) and not _looks_like_spec(spec):
            items.extend((f"{key}.{name}", inner) for name, inner in spec.items())
        else:
            items.append((key, spec))
    seen: set[str] = set()
    for key, _ in items:
        if key in seen:
            raise ConfigError("A key appears twice in the search space.", values={"key": key},
                              fix="keep one distribution per key")
        seen.add(key)
    return items


def _looks_like_spec(spec: Mapping[str, Any]) -> bool:
    return "type" in spec or "choices" in spec


def _parse(key: str, spec: Any) -> Param:
    from torchwise.config import coerce_value

    try:  # an unknown key gets the config's own error, with its allowed keys and did-you-mean
        coerce_value(key, default_value(key))
    except ConfigError as exc:
        raise ConfigError(exc.what, values={**exc.values, "value": spec}, fix=exc.fix) from None
    if key in _NOT_SEARCHABLE:
        raise ConfigError("This configuration key cannot be searched.", values={"key": key, "why": _NOT_SEARCHABLE[key]},
                          fix=f"remove {key} from the search space")
    if isinstance(spec, (list, tuple)):
        spec = {"type": "categorical", "choices": list(spec)}
    if not isinstance(spec, Mapping):
        raise ConfigError("A search-space entry must be a distribution.", values={"key": key, "got": spec},
                          fix=f"write e.g. `{key}: {{type: uniform, low: ..., high: ...}}` or a list of choices")
    kind = str(spec.get("type", "categorical" if "choices" in spec else "")).strip().lower()
    kind = _ALIASES.get(kind, kind)
    if kind not in KINDS:
        guess = difflib.get_close_matches(kind, list(KINDS) + list(_ALIASES), n=1)
        values = {"key": key, "type": spec.get("type"), "allowed": ", ".join(KINDS)}
        if guess:
            values["did you mean"] = _ALIASES.get(guess[0], guess[0])
        raise ConfigError("Unknown distribution type in the search space.", values=values,
                          fix="use type: loguniform, uniform, int or categorical")
    unknown = set(map(str, spec)) - _FIELDS[kind]
    if unknown:
        name = sorted(unknown)[0]
        guess = difflib.get_close_matches(name, sorted(_FIELDS[kind]), n=1)
        values = {"key": key, "field": name, "allowed": ", ".join(sorted(_FIELDS[kind]))}
        if guess:
            values["did you mean"] = guess[0]
        raise ConfigError(f"Unknown field in a {kind} distribution.", values=values,
                          fix="use only the allowed fields")
    if kind == "categorical":
        return _categorical(key, spec)
    return _numeric(key, kind, spec)


def _categorical(key: str, spec: Mapping[str, Any]) -> Param:
    from torchwise.config import coerce_value

    choices = spec.get("choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise ConfigError("A categorical distribution needs a non-empty list of choices.",
                          values={"key": key, "choices": choices}, fix=f"write `{key}: [first, second]`")
    checked = []
    for choice in choices:
        if not (choice is None or isinstance(choice, (bool, int, float, str))):
            raise ConfigError("Categorical choices must be plain values (text, numbers, true/false, null).",
                              values={"key": key, "choice": choice}, fix="list scalar values only")
        coerce_value(key, choice)  # a choice `train` would refuse is refused here, before any trial runs
        checked.append(choice)
    if len(set(map(repr, checked))) != len(checked):
        raise ConfigError("A categorical distribution lists a choice twice.", values={"key": key, "choices": checked},
                          fix="list each choice once")
    return Param(key, "categorical", choices=tuple(checked))


def _number(key: str, name: str, value: Any) -> float:
    # PyYAML reads `1e-4` (no dot) as text; accept it as the number everyone means (the one reader of
    # numbers in text, as config values use).
    if isinstance(value, str):
        from torchwise.numbers import NumberTextError, read_number

        try:
            value = read_number(value)
        except NumberTextError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"The search-space bound {name!r} must be a finite number.",
                          values={"key": key, name: value}, fix=f"write e.g. {name}: 0.001")
    return value


def _numeric(key: str, kind: str, spec: Mapping[str, Any]) -> Param:
    from torchwise.config import coerce_value

    for name in ("low", "high"):
        if name not in spec:
            raise ConfigError(f"A {kind} distribution needs low and high.", values={"key": key, "missing": name},
                              fix=f"write `{key}: {{type: {kind}, low: ..., high: ...}}`")
    low, high = _number(key, "low", spec["low"]), _number(key, "high", spec["high"])
    kinds = _value_types(key)
    if kind == "int" and not kinds & {int, float}:
        raise ConfigError("An int distribution over a key that does not take integers.",
                          values={"key": key, "key type": _describe(kinds)},
                          fix="use type: uniform or loguniform for a float key, categorical for a choice")
    if kind != "int" and float not in kinds:
        fix = "use type: int" if int in kinds else "use type: categorical with a list of choices"
        raise ConfigError(f"A {kind} distribution over a key that does not take real numbers.",
                          values={"key": key, "key type": _describe(kinds)}, fix=fix)
    if kind == "int":
        for name, value in (("low", low), ("high", high)):
            if float(value) != int(value):
                raise ConfigError(f"The bound {name!r} of an int distribution must be a whole number.",
                                  values={"key": key, name: value}, fix=f"write {name}: {int(value)}")
        low, high = int(low), int(high)
    if not low < high:
        raise ConfigError("A distribution's low must be below its high.", values={"key": key, "low": low, "high": high},
                          fix="swap them, or fix the key to one value in the run config instead of searching it")
    log = kind == "loguniform" or bool(spec.get("log", False))
    if log and low <= 0:
        raise ConfigError("A log-scale distribution needs low > 0.", values={"key": key, "low": low},
                          fix="use a small positive low (e.g. 1.0e-5), or type: uniform")
    step = spec.get("step")
    if step is not None:
        step = _number(key, "step", step)
        if step <= 0 or (kind == "int" and float(step) != int(step)):
            raise ConfigError("A distribution's step must be a positive number (whole for int).",
                              values={"key": key, "step": step}, fix="write e.g. step: 16")
        if kind == "int" and log and step != 1:
            raise ConfigError("An int distribution cannot have both log: true and a step.",
                              values={"key": key, "step": step}, fix="drop one of them")
        step = int(step) if kind == "int" else float(step)
    # The config's range checks (e.g. train.lr > 0, data.val_fraction < 1) on both ends: the
    # allowed ranges are intervals, so every value sampled between two accepted ends is accepted.
    coerce_value(key, low)
    coerce_value(key, high)
    return Param(key, kind, low=low, high=high, step=step, log=log and kind == "int")


def default_value(key: str) -> Any:
    """A value that passes type checks for `key` when it exists (so that only unknown keys fail)."""
    from torchwise.config import SECTIONS

    section, _, name = key.partition(".")
    cls = SECTIONS.get(section)
    if cls is None:
        return None
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    return None


def _value_types(key: str) -> set[Any]:
    from torchwise.config import SECTIONS

    section, _, name = key.partition(".")
    tp = typing.get_type_hints(SECTIONS[section])[name]
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    kinds: set[Any] = set()
    for option in options:
        if option is float:
            kinds.add(float)
        elif option is int:
            kinds.add(int)
        elif option is not type(None):
            kinds.add(Literal if typing.get_origin(option) is Literal else option)
    return kinds


def _describe(kinds: set[Any]) -> str:
    return ", ".join(sorted("choice" if k is Literal else getattr(k, "__name__", str(k)) for k in kinds))


def space_to_dict(params: list[Param]) -> dict[str, Any]:
    """The normalized space (stored with the study, so a resumed search can check it is the same)."""
    return {p.key: p.to_dict() for p in params}
