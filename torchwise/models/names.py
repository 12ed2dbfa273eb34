"""Which family a model name belongs to, and refusing a name nothing can build (with did-you-mean).

    smallcnn, mlp            built in
    resnet18, vit_b_16, ...  torchvision architectures
    timm:convnext_atto       a timm architecture (the `timm:` prefix is reserved for timm)
    mypkg.nets:make_net      the user's own callable
"""
from __future__ import annotations

import difflib
from typing import Any, Literal

from torchwise.errors import TorchwiseError
from torchwise.models.builtin import BUILTIN

TIMM_PREFIX = "timm:"
Family = Literal["builtin", "torchvision", "timm", "user"]


def model_family(name: str) -> Family:
    """Where `name` is built from; a name that is neither built in nor a callable is torchvision's."""
    if name.startswith(TIMM_PREFIX):
        return "timm"
    if ":" in name:
        return "user"
    return "builtin" if name in BUILTIN else "torchvision"


def torchvision_names() -> list[str]:
    from torchvision import models as tvm

    return sorted(tvm.list_models(module=tvm))


def import_timm() -> Any:
    """The timm package, or an error naming what to install (timm is optional)."""
    try:
        import timm
    except ImportError:
        raise TorchwiseError("This model name needs the timm package, which is not installed.",
                             values={"package": "timm"},
                             fix="pip install timm (or use a torchvision architecture such as --model resnet18)") from None
    return timm


def timm_architecture(name: str) -> str:
    """The timm architecture of a `timm:NAME` model name, refused with did-you-mean when timm has no
    such model. Only names of timm's own registry: a Hub or folder source (hf-hub:..., local-dir:...)
    would make timm download or read files itself, while weights here come only from --weights."""
    arch = name[len(TIMM_PREFIX):]
    timm = import_timm()
    if ":" in arch or "/" in arch:
        raise TorchwiseError("A timm model name must be an architecture of timm's registry.",
                             values={"model": name},
                             fix="use --model timm:ARCHITECTURE (e.g. timm:resnet18) and pass the pretrained "
                                 "weights as a local file with --weights FILE (nothing is downloaded)")
    if not arch or not timm.is_model(arch):
        known = timm.list_models()
        guess = difflib.get_close_matches(arch, known, n=1, cutoff=0.5)
        values: dict[str, Any] = {"model": name, "timm version": timm.__version__, "timm models": len(known)}
        if guess:
            values["did you mean"] = TIMM_PREFIX + guess[0]
        raise TorchwiseError("Unknown timm model name.", values=values,
                             fix=(f"use --model {TIMM_PREFIX}{guess[0]}" if guess else
                                  "list the names with python -c \"import timm; print(timm.list_models('*vit*'))\""))
    return arch


def check_model_name(name: str) -> None:
    """Refuse a model name that build_model cannot build (with did-you-mean), before any data is read.
    A `pkg.module:callable` is checked when it is imported."""
    family = model_family(name)
    if family == "timm":
        timm_architecture(name)
    elif family == "torchvision" and name not in torchvision_names():
        raise unknown_model(name)


def unknown_model(name: str) -> TorchwiseError:
    names = list(BUILTIN) + torchvision_names()
    guess = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    values: dict[str, Any] = {"model": name, "built in": ", ".join(BUILTIN),
                              "torchvision": ", ".join(n for n in names if n not in BUILTIN)}
    if guess:
        values["did you mean"] = guess[0]
    return TorchwiseError("Unknown model name.", values=values,
                          fix=(f"use --model {guess[0]}" if guess else "use one of the names listed")
                          + ", 'timm:NAME' for a timm model, or 'package.module:function' for your own model")


def timm_input(name: str) -> tuple[int, list[float], list[float]]:
    """(square input side, mean, std) a `timm:NAME` model's pretrained weights were trained with (from
    timm's registry: no model is built, nothing is read or fetched); ImageNet's at 224 where timm
    records none. ViTs need this side (their position embeddings are sized for it); many use 0.5/0.5."""
    arch = timm_architecture(name)  # first: a missing timm is said in our words
    import timm.models

    cfg = timm.models.get_pretrained_cfg(arch)
    side = int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224
    mean = list(cfg.mean) if cfg is not None and cfg.mean else [0.485, 0.456, 0.406]
    std = list(cfg.std) if cfg is not None and cfg.std else [0.229, 0.224, 0.225]
    return side, [float(m) for m in mean], [float(s) for s in std]
