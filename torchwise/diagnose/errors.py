"""Readable errors: turn the classic PyTorch crashes into what happened and how to fix it.

    text = translate(exc)          # None when the error is not one we know
"""
from __future__ import annotations

import re
from typing import Any, Callable

_RULES: list[tuple[re.Pattern, Callable[[re.Match, BaseException, Any], tuple[str, str]]]] = []


def _rule(pattern: str):
    def deco(fn):
        _RULES.append((re.compile(pattern, re.S | re.I), fn))
        return fn
    return deco


def translate(exc: BaseException, watcher: Any = None) -> str | None:
    """A few lines for a person: what happened and the fix, or None if the error is not a known one."""
    text = f"{type(exc).__name__}: {exc}"
    for pattern, fn in _RULES:
        m = pattern.search(text)
        if m:
            what, fix = fn(m, exc, watcher)
            lines = ["torchwise: what happened: " + what, "  fix:"]
            lines += ["      " + line for line in fix.strip("\n").splitlines()]
            return "\n".join(lines)
    return None


def _frames_self(exc: BaseException, cls_name: str):
    """Instances of torch.nn.<cls_name> whose forward is in the traceback (innermost last)."""
    found = []
    tb = exc.__traceback__
    while tb is not None:
        obj = tb.tb_frame.f_locals.get("self")
        if obj is not None and type(obj).__name__ == cls_name:
            found.append(obj)
        tb = tb.tb_next
    return found


def _frame_local(exc: BaseException, name: str, funcs: tuple[str, ...] = (), *, want=None):
    """The innermost value of local `name` in the traceback's frames (only frames of `funcs` if given)."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if not funcs or frame.f_code.co_name in funcs:
            value = frame.f_locals.get(name)
            if value is not None and (want is None or want(value)):
                found = value
        tb = tb.tb_next
    return found


def _shape(t: Any) -> str:
    shape = getattr(t, "shape", None)
    return "(" + ", ".join(str(d) for d in shape) + ")" if shape is not None else "?"


@_rule(r"Expected all tensors to be on the same device.*?(\w+:?\d*) and (\w+:?\d*)")
def _device(m, exc, w):
    return (f"one operation got tensors on two devices ({m.group(1)} and {m.group(2)}). The model and every "
            "batch must live on the same device.",
            """
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = model.to(device)                      # once, before creating the optimizer
for x, y in loader:
    x, y = x.to(device), y.to(device)         # every batch (and every tensor you create in forward)
""")


@_rule(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
def _linear(m, exc, w):
    batch, got, expected, out = (int(g) for g in m.groups())
    name = ""
    layers = [layer for layer in _frames_self(exc, "Linear") if getattr(layer, "in_features", None) == expected]
    if layers and w is not None:
        name = f" ({w.module_name(layers[-1])})"
    return (f"a Linear layer{name} expects {expected} input features but gets {got}: the flattened output of the "
            f"layers before it has {got} values per sample (batch of {batch}).",
            f"""
nn.Linear({got}, {out})                       # in_features = {got}
# or let PyTorch count it for you: nn.LazyLinear({out})
# or compute it once with a dummy pass:
#     with torch.no_grad(): n = features(torch.zeros(1, *input_shape)).flatten(1).shape[1]
""")


@_rule(r"Given groups=\d+, weight of size \[(\d+), (\d+),.*?expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels")
def _conv_channels(m, exc, w):
    expected, got = int(m.group(4)), int(m.group(5))
    kind, name = "Conv2d", ""
    for cls in ("Conv1d", "Conv2d", "Conv3d"):
        layers = [c for c in _frames_self(exc, cls) if getattr(c, "in_channels", None) == expected]
        if layers:
            kind = cls
            if w is not None:
                name = f" ({w.module_name(layers[-1])})"
    return (f"a convolution{name} expects {expected} input channels but the input [{m.group(3).strip()}] has {got} "
            "(the channel dimension is dim 1: N, C, ...).",
            f"""
nn.{kind}({got}, {m.group(1)}, kernel_size=...)   # in_channels = channels of the input
# or convert the images: x = x.expand(-1, 3, -1, -1) (grayscale -> 3 channels), T.Grayscale(3)
""")


@_rule(r"(expected (m1 and m2|mat1 and mat2) to have the same dtype|must have the same dtype|expected scalar type (\w+) but found (\w+)|Input type \((\w+)\) and (bias|weight) type \((\w+)\) should be the same|Found dtype (\w+) but expected (\w+))")
def _dtype(m, exc, w):
    text = str(exc)
    if re.search(r"found Float|but expected Long|expected scalar type Long", text, re.I) and "Long" in text:
        return ("a loss got float targets where it needs integer class indices (torch.long).",
                """
loss = F.cross_entropy(logits, y.long())     # class indices 0..C-1 as int64
""")
    return (f"an operation mixes two dtypes ({text.splitlines()[0][:160]}). Usually the data is float64 "
            "(numpy's default) while the model is float32.",
            """
x = torch.from_numpy(x_np).float()           # or torch.tensor(x_np, dtype=torch.float32)
y = torch.from_numpy(y_np).long()            # class labels as int64 (regression targets: .float())
""")


@_rule(r"Target (-?\d+) is out of bounds|t >= 0 && t < n_classes|index out of range in self|device-side assert")
def _target_bounds(m, exc, w):
    label = m.group(1) if m.groups() and m.group(1) else None
    hint = f"label {label}" if label else "a label"
    return (f"{hint} is outside 0..C-1 for the C outputs of the model. Labels that start at 1, or a model "
            "with fewer outputs than the data has classes, cause this.",
            """
print(y.min().item(), y.max().item())        # must be 0 and C-1
y = y - 1                                    # if the labels start at 1
model.fc = nn.Linear(in_features, int(y_train.max()) + 1)   # one output per class
""")


@_rule(r"(CUDA out of memory|OutOfMemoryError|out of memory)")
def _oom(m, exc, w):
    return ("the GPU ran out of memory. Remedies, in the order to try them:",
            """
1. lower batch_size (halve it until it fits)
2. mixed precision: with torch.autocast("cuda", dtype=torch.bfloat16): loss = criterion(model(x), y)
3. gradient accumulation: loss = loss / k; step and zero_grad every k batches (same effective batch)
4. gradient checkpointing: torch.utils.checkpoint.checkpoint(block, x) on the largest blocks
5. a lighter optimizer state: SGD(momentum=0.9) keeps one buffer per weight, Adam two
6. free what you hold: log loss.item() (not loss), del big tensors, then torch.cuda.empty_cache()
""")


@_rule(r"Error\(s\) in loading state_dict")
def _state_dict(m, exc, w):
    text = str(exc)
    unexpected = re.findall(r'"(module\.[^"]+)"', text.split("Unexpected key(s)")[-1]) if "Unexpected" in text else []
    missing_mod = "Missing key(s)" in text and re.search(r'Missing key\(s\) in state_dict: "module\.', text)
    if unexpected:
        return ("the checkpoint was saved from a DataParallel/DistributedDataParallel model: every key starts "
                "with 'module.', the plain model's keys do not.",
                """
state = torch.load(path, map_location="cpu")
state = {k.removeprefix("module."): v for k, v in state.items()}
model.load_state_dict(state)
# and save without the wrapper next time: torch.save(model.module.state_dict(), path)
""")
    if missing_mod:
        return ("the model is wrapped in DataParallel/DDP (keys start with 'module.') but the checkpoint is not.",
                """
model.module.load_state_dict(torch.load(path, map_location="cpu"))   # load into the wrapped model
""")
    if "size mismatch" in text:
        return ("the checkpoint's tensors have other shapes than the model's (a different head or number of classes).",
                """
state = {k: v for k, v in torch.load(path).items() if not k.startswith("fc.")}  # drop the head
model.load_state_dict(state, strict=False)
""")
    return ("the checkpoint's keys do not match the model's (renamed or missing layers).",
            """
result = model.load_state_dict(state, strict=False)
print(result.missing_keys, result.unexpected_keys)   # then rename keys or fix the model definition
""")


@_rule(r"element 0 of tensors does not require grad")
def _no_grad(m, exc, w):
    return ("backward() was called on a loss that is not connected to any trainable parameter: it was computed "
            "under torch.no_grad(), from .detach()/.item()/.numpy() values, or all parameters are frozen.",
            """
loss = criterion(model(x), y)                # no torch.no_grad() around training, no .item() before backward
print(loss.requires_grad, any(p.requires_grad for p in model.parameters()))
""")


@_rule(r"Trying to backward through the graph a second time")
def _second_backward(m, exc, w):
    return ("backward() went through a graph that an earlier backward() already freed: usually a tensor from a "
            "previous step (a running loss, a hidden state) is reused in this step's loss.",
            """
running_loss += loss.item()                  # accumulate floats, not tensors
hidden = hidden.detach()                     # RNNs: cut the state between batches
""")


@_rule(r"Expected more than 1 value per channel when training")
def _bn_one(m, exc, w):
    return ("a BatchNorm layer got a batch of 1 sample in training mode (usually the last, incomplete batch).",
            """
loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)
""")


@_rule(r"0D or 1D target tensor expected|multi-target not supported")
def _target_shape(m, exc, w):
    funcs = ("cross_entropy", "nll_loss")
    logits, target = _frame_local(exc, "input", funcs), _frame_local(exc, "target", funcs)
    values = f" (logits {_shape(logits)}, targets {_shape(target)})" if target is not None else ""
    what = (f"cross_entropy/nll_loss got a 2-D target{values}; it needs class indices of shape (N,), one integer "
            "per sample (or class probabilities of exactly the logits' shape).")
    if getattr(target, "ndim", 0) == 2 and target.shape[1] > 1:
        return (what, """
loss = F.cross_entropy(logits, y.argmax(1))  # one-hot targets -> class indices
""")
    return (what, """
loss = F.cross_entropy(logits, y.squeeze(1).long())   # (N, 1) -> (N,)
# or build the labels 1-D from the start: torch.tensor(labels) rather than torch.tensor([[l] for l in labels])
""")


@_rule(r"modified by an inplace operation(?:: \[([\w.]+) \[([\d, ]*)\]\](?:, which is output (\d+) of (\w+),)? "
       r"is at version (\d+); expected version (\d+))?")
def _inplace(m, exc, w):
    tensor = ""
    if m.group(1):
        made_by = f", made by {m.group(4)}," if m.group(4) else ""
        tensor = (f" The tensor: {m.group(1)} of shape [{m.group(2)}]{made_by} was changed in place "
                  f"{int(m.group(5)) - int(m.group(6))} time(s) after it was saved (version {m.group(6)} -> "
                  f"{m.group(5)}).")
    return ("a tensor needed by backward() was changed in place (x += ..., x[...] = ..., relu_(), "
            f"inplace=True) between the forward pass and backward().{tensor}",
            """
x = x + residual                             # instead of x += residual
nn.ReLU()                                    # instead of nn.ReLU(inplace=True) where the input is reused
x = x.clone(); x[mask] = 0                   # clone before writing into a tensor autograd saved
torch.autograd.set_detect_anomaly(True)      # (debug only) the error then names the forward line at fault
""")
