"""Starting weights from a local file, for a model already built for the task's classes.

The file is the pretrained model's state dict with its ORIGINAL head (1000 ImageNet classes, say):
every backbone tensor must be in it with the model's shape and is loaded; the head's tensors are
skipped where their shapes are for another number of classes (the new head starts fresh), and that
is said. Anything else that does not fit (a missing backbone tensor, another shape outside the
head, a file of another architecture) is refused, naming the first keys with both shapes: loading
part of a backbone would train on silently random layers.

The file is read by torchwise.weights (its bytes checked first; safetensors, or a torch.save state
dict read with weights_only=True), and its keys are matched to the model by the same rules as every
other load (DDP's `module.`, torch.compile's `_orig_mod.`, a `model.` holder, `state_dict` nesting).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from torchwise.errors import CheckpointError
from torchwise.models.heads import head_prefixes


@dataclass
class PretrainedLoad:
    """What a load took from the file."""
    path: str
    loaded: int                                        # tensors copied from the file
    skipped: list[str] = field(default_factory=list)   # "fc.weight: file (1000, 512), model (5, 512)"
    fresh: list[str] = field(default_factory=list)     # head tensors the file does not hold

    def summary(self) -> str:
        """One line for the run's log."""
        text = f"weights: {self.loaded} tensors loaded from {self.path}"
        if self.skipped:
            text += (f"; the head's {len(self.skipped)} skipped, shaped for another number of classes (the new "
                     f"head starts fresh): " + ", ".join(self.skipped))
        if self.fresh:
            text += "; not in the file, the new head starts fresh: " + ", ".join(self.fresh)
        return text


def _shape(tensor: torch.Tensor) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _is_class_output(file_tensor: torch.Tensor, own: torch.Tensor, num_classes: int | None) -> bool:
    """A layer that maps to classes outside the main head (torchvision googlenet's and inception's
    auxiliary classifiers): only its class dimension differs, and the model's is the task's."""
    return (num_classes is not None and own.dim() >= 1 and file_tensor.dim() == own.dim()
            and own.shape[0] == num_classes and _shape(file_tensor)[1:] == _shape(own)[1:])


def load_pretrained(model: nn.Module, path: str, *, num_classes: int | None = None,
                    model_name: str | None = None) -> PretrainedLoad:
    """Load the local weights file `path` into `model` (built for `num_classes`): see the module doc."""
    from torchwise.weights import load_state_dict, match_keys

    state = load_state_dict(path)
    matched, unexpected = match_keys(state, model)
    own = model.state_dict()
    in_head = head_prefixes(model)
    differ = [k for k, v in matched.items() if _shape(v) != _shape(own[k])]
    skip = [k for k in differ if k.startswith(in_head) or _is_class_output(matched[k], own[k], num_classes)]
    wrong = [k for k in differ if k not in skip]
    # num_batches_tracked is a counter, not a weight: files written before BatchNorm had it lack it,
    # and BatchNorm's own loading starts it at 0 then
    missing = [k for k in own if k not in matched and not k.startswith(in_head)
               and not k.endswith("num_batches_tracked")]
    if wrong or missing or unexpected:
        raise _does_not_match(path, model, model_name, missing, list(unexpected),
                              [f"{k}: file {_shape(matched[k])} vs model {_shape(own[k])}" for k in wrong])
    model.load_state_dict({k: v for k, v in matched.items() if k not in skip}, strict=False)
    return PretrainedLoad(
        path=str(path), loaded=len(matched) - len(skip),
        skipped=[f"{k}: file {_shape(matched[k])}, model {_shape(own[k])}" for k in skip],
        fresh=[k for k in own if k.startswith(in_head) and k not in matched])


def _does_not_match(path: str, model: nn.Module, model_name: str | None, missing: list[str],
                    unexpected: list[str], shapes: list[str]) -> CheckpointError:
    from torchwise.weights import likely_cause

    named = f"--model {model_name}" if model_name else "the model"
    return CheckpointError(
        "The weights file does not match this architecture.",
        values={"file": path, "model": model_name or type(model).__name__, "missing keys": missing[:8],
                "unexpected keys": unexpected[:8], "shape mismatches": shapes[:8],
                "counts": f"{len(missing)} missing, {len(unexpected)} unexpected, {len(shapes)} other shapes "
                          "(the head's shapes may differ: those are skipped)",
                "likely cause": likely_cause(missing, unexpected, shapes)},
        fix=f"pass the state dict of the pretrained model that {named} builds (same architecture and size, "
            "e.g. resnet18 weights for resnet18, not resnet34's); only its classification head may differ")
