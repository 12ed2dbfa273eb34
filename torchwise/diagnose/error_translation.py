"""Readable errors: turn the classic PyTorch crashes into what happened and how to fix it.

    text = translate(exc)          # None when the error is not one we know
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable

_RULES: list[tuple[re.Pattern, Callable[[re.Match, BaseException, Any], tuple[str, str] | None]]] = []


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
            found = fn(m, exc, watcher)
            if found is None:  # the rule looked closer and it is not its case
                continue
            what, fix = found
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


def _in_module(exc: BaseException, prefix: str) -> bool:
    """Whether a frame of the traceback runs code of the module `prefix` (or one under it)."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__") or ""
        if name == prefix or name.startswith(prefix + "."):
            return True
        tb = tb.tb_next
    return False


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
        name = f" ({w.models.module_name(layers[-1])})"
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
                name = f" ({w.models.module_name(layers[-1])})"
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


def _loaded_path(exc: BaseException) -> str:
    f = _frame_local(exc, "f", ("load",))
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        return f" from {str(f)!r}"
    name = getattr(f, "name", None)
    return f" from {name!r}" if isinstance(name, str) else ""


@_rule(r"Attempting to deserialize object on (?:a CUDA device|CUDA device (\d+)) but torch\.cuda\.(is_available\(\) is False|device_count\(\) is (\d+))")
def _cuda_checkpoint(m, exc, w):
    location = _frame_local(exc, "location", want=lambda v: isinstance(v, str)) or (
        f"cuda:{m.group(1)}" if m.group(1) else "cuda")
    path = _loaded_path(exc)
    if m.group(3) is None:
        return (f"torch.load{path} found tensors saved on {location}, and this machine has no usable GPU "
                "(torch.cuda.is_available() is False): the checkpoint was saved on a GPU machine.",
                """
state = torch.load(path, map_location="cpu")          # put every tensor on the CPU while loading
state = torch.load(path, map_location=device)         # or straight onto the device you train on
# and save portable checkpoints next time: torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path)
""")
    return (f"torch.load{path} found tensors saved on {location}, but this machine has only {m.group(3)} GPU(s).",
            """
state = torch.load(path, map_location="cuda:0")       # or map_location="cpu", or map_location=device
""")


@_rule(r"cannot assign (module|parameters|buffer)s? before Module\.__init__\(\) call")
def _module_init(m, exc, w):
    obj = _frame_local(exc, "self", ("__setattr__",))
    attr = _frame_local(exc, "name", ("__setattr__",), want=lambda v: isinstance(v, str))
    cls = type(obj).__name__ if obj is not None else "MyModel"
    where = f" (assigning self.{attr})" if attr else ""
    what = {"module": "a layer", "parameters": "a Parameter", "buffer": "a buffer"}.get(m.group(1), "a layer")
    return (f"{cls}.__init__ sets {what} on self{where} before nn.Module.__init__() has run: it does not call "
            "super().__init__(), or calls it too late, so the module has no registry for its layers yet.",
            f"""
class {cls}(nn.Module):
    def __init__(self, ...):
        super().__init__()                   # first line of __init__, before any self.x = ...
        self.{attr or "fc"} = ...
""")


def _collate_none():
    return ("the DataLoader could not batch the samples: __getitem__ returned None (for a sample, or a field of "
            "one), which the default collate_fn cannot batch. A sample that fails to load and returns None does this.",
            """
# in __getitem__: raise (or fix) the failing sample instead of returning None, or drop the Nones while batching:
from torch.utils.data import default_collate
loader = DataLoader(ds, batch_size=32, collate_fn=lambda b: default_collate([s for s in b if s is not None]))
""")


@_rule(r"object of type 'NoneType' has no len\(\)")
def _collate_none_len(m, exc, w):
    # default_collate checks that all samples have the first sample's length: a None after a tuple fails there
    if "collate" in str(exc) or _in_module(exc, "torch.utils.data._utils.collate"):
        return _collate_none()
    return None


@_rule(r"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found (?:<class '([\w.]+)'>|(\w+))")
def _collate_type(m, exc, w):
    found = m.group(1) or m.group(2)
    what = (f"the DataLoader could not batch the samples: __getitem__ returned a {found}, which the default "
            "collate_fn cannot stack (it handles tensors, numpy arrays, numbers, strings, dicts, lists and tuples).")
    if found == "NoneType":
        return _collate_none()
    if "PIL" in found or "Image" in found:
        return (what + " Images must become tensors inside the dataset.",
                """
import torchvision.transforms.v2 as T
transform = T.Compose([T.PILToTensor(), T.ToDtype(torch.float32, scale=True)])   # or T.ToTensor()
img = transform(img)                         # in __getitem__, before returning the sample
""")
    return (what, """
return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)   # in __getitem__: tensors (or numbers)
# or batch the samples yourself: DataLoader(ds, batch_size=32, collate_fn=my_collate)
""")


_SAME_SIZE_FIX = """
T.Resize((224, 224))                         # images: resize (or T.CenterCrop / T.RandomResizedCrop) to one size
#   in the dataset's transform, before T.ToTensor()
# sequences: pad them in a custom collate_fn
from torch.nn.utils.rnn import pad_sequence
def collate(batch):
    xs, ys = zip(*batch)
    return pad_sequence(xs, batch_first=True), torch.tensor(ys)
loader = DataLoader(ds, batch_size=32, collate_fn=collate)
"""


@_rule(r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry (\d+) and \[([\d, ]*)\] at entry (\d+)")
def _stack_sizes(m, exc, w):
    a, i, b, j = m.groups()
    from_loader = "collate" in str(exc) or _in_module(exc, "torch.utils.data")
    if not from_loader:
        return (f"torch.stack got tensors of different shapes: [{a}] (entry {i}) and [{b}] (entry {j}); every "
                "tensor must have the same shape.",
                """
print([t.shape for t in tensors])            # find the odd one out
torch.cat(tensors)                           # if they differ only in dim 0, concatenate instead of stacking
""")
    return (f"the DataLoader could not batch the samples: __getitem__ returned tensors of different shapes, [{a}] "
            f"(sample {i} of the batch) and [{b}] (sample {j}). The default collate_fn stacks them, so every sample "
            "must have the same shape.", _SAME_SIZE_FIX)


@_rule(r"Trying to resize storage that is not resizable")
def _stack_sizes_in_worker(m, exc, w):
    # in a worker, default_collate stacks into shared memory sized from the first sample: a sample of another
    # size fails with this message instead of "stack expects each tensor to be equal size"
    if "collate" not in str(exc) and not _in_module(exc, "torch.utils.data._utils.collate"):
        return None
    return ("the DataLoader could not batch the samples: __getitem__ returned tensors of different shapes (in a "
            "worker process the default collate_fn reports that as 'Trying to resize storage that is not "
            "resizable'). Every sample must have the same shape.",
            """
print({tuple(ds[i][0].shape) for i in range(20)})   # the shapes the dataset returns (or: num_workers=0)
""" + _SAME_SIZE_FIX)


_MAIN_GUARD_FIX = """
def main():
    ...                                      # build the dataset, model, loader and train here
if __name__ == "__main__":                   # spawn/forkserver workers re-import this file: guard the training
    main()
"""


@_rule(r"An attempt has been made to start a new process before the\s+current process has finished its bootstrapping phase")
def _main_guard(m, exc, w):
    where = ""
    tb = exc.__traceback__
    while tb is not None:  # the user's line that started the process while the worker was importing the script
        if tb.tb_frame.f_globals.get("__name__") == "__mp_main__":
            where = f" ({tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno})"
        tb = tb.tb_next
    return ("a worker process (DataLoader num_workers > 0 or multiprocessing) started with the spawn/forkserver "
            "start method re-imported your script, and the script's top-level code started workers again"
            f"{where}. The training code is not under an `if __name__ == \"__main__\":` guard (spawn is the "
            "default on Windows and macOS, forkserver on Linux from Python 3.14).", _MAIN_GUARD_FIX)


@_rule(r"DataLoader worker \(pids?(?:\(s\))? ([\d, ]+)\) (exited unexpectedly|is killed by signal: ([\w ]+))")
def _worker_died(m, exc, w):
    cause = str(exc.__cause__ or "")  # the SIGCHLD handler's message: exit code or signal of the worker
    sig = m.group(3)
    if sig is None and (found := re.search(r"killed by signal: ([\w ]+)", cause)):
        sig = found.group(1)
    code = re.search(r"exit code (-?\d+)", cause)
    loader_iter = _frame_local(exc, "self", want=lambda v: isinstance(getattr(v, "_workers", None), list))
    workers = loader_iter._workers if loader_iter is not None else []
    method = next((getattr(p, "_start_method", None) for p in workers), None)
    if workers and method is None:  # the default context's processes: its start method
        import multiprocessing
        method = multiprocessing.get_start_method(allow_none=True)
    values = [f"pid(s) {m.group(1).strip()}"]
    if code:
        values.append(f"exit code {code.group(1)}")
    if sig:
        values.append(f"killed by signal {sig.strip()}")
    if method:
        values.append(f"start method {method}, {len(workers)} worker(s)")
    what = f"a DataLoader worker process died ({'; '.join(values)})."
    if sig and "bus" in sig.lower():
        return (what + " A bus error in a worker means the shared memory (/dev/shm) used to pass batches is full.",
                """
docker run --shm-size=8g ...                 # (or --ipc=host): more shared memory
loader = DataLoader(ds, batch_size=32, num_workers=2)   # or fewer workers / smaller batches
""")
    if sig and "kill" in sig.lower():
        return (what + " Killed is usually the out-of-memory killer: the workers together use more RAM than there is.",
                """
loader = DataLoader(ds, batch_size=32, num_workers=2)   # fewer workers; each one holds a copy of the dataset
# load samples lazily in __getitem__ instead of keeping everything in Python lists in the dataset
""")
    if method in ("spawn", "forkserver"):
        return (what + f" With the {method} start method, a worker that exits with an error right away is most "
                "often a script without an `if __name__ == \"__main__\":` guard: the worker re-imports it and "
                "fails (its own error is printed above, 'An attempt has been made to start a new process ...').",
                _MAIN_GUARD_FIX + """# if the script is guarded: rerun with num_workers=0 to see the worker's own error
""")
    return (what + " The worker's own error is printed above this traceback, if any.",
            """
loader = DataLoader(ds, batch_size=32, num_workers=0)   # rerun without workers: the real error appears
# workers started with spawn (Windows, macOS) also need the `if __name__ == "__main__":` guard
""")


@_rule(r"EADDRINUSE|address already in use")
def _port_in_use(m, exc, w):
    text = str(exc)
    distributed = "server socket" in text or _in_module(exc, "torch.distributed")
    env = os.environ.get("MASTER_PORT")
    port = re.search(r"port:? (\d+)", text)
    port = port.group(1) if port else env or "29500"
    if not distributed:
        return ("a server could not listen on its port: another process already uses it (address already in use).",
                """
ss -ltnp                                     # or lsof -i :PORT: find the process holding the port, stop it
# or start this one on another port
""")
    env_note = f" (MASTER_PORT={env})" if env else ""
    return (f"the distributed rendezvous (TCPStore of init_process_group) could not listen on port {port}{env_note}: "
            "another process already uses it, usually a second training run with the same MASTER_PORT, or an "
            "earlier run that is still alive.",
            f"""
torchrun --master-port={int(port) + 1} ... train.py    # give each concurrent run its own port
MASTER_PORT={int(port) + 1} python train.py            # (the same, for a script that sets up the group itself)
torchrun --standalone --nproc-per-node=N train.py     # one machine: torchrun picks a free port
torchrun --rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nproc-per-node=N train.py   # same, explicitly
ss -ltnp | grep {port}                                # or lsof -i :{port}: find (and stop) the run holding it
""")
