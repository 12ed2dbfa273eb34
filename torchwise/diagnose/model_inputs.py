"""What the models are fed: input statistics, rows hashed for leaks, sample shapes, the batch for the overfit test.

Its own module because these are questions about the data seen through the model's first argument, not
about the model: they run from the model's root pre-hook (in deep steps, or when row hashing is on) and
keep their own evidence (input_stats, train_hashes, eval_groups, bench_shapes, overfit_capture).
"""
from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch
from torch import nn

from torchwise.diagnose.shape_watch import SAMPLE_SHAPES_KEPT, sample_shape_key
from torchwise.diagnose.tensors import all_finite
from torchwise.diagnose.user_code import called_by_torchwise, user_where
from torchwise.diagnose.watch_parts import ModelsView, PassesView, RootInfo

TRAIN_REPEAT_PROBE = 5000  # training rows over which the chance of a repeated sample is measured


class InputsWatcher(Protocol):
    """What ModelInputs reads of the Watcher."""
    steps: int              # optimizer steps so far
    loaders: PassesView   # the passes over DataLoaders (which pass an evaluation forward belongs to)
    models: ModelsView      # its hooks on the model are not copied with it


class ModelInputs:
    """The Watcher's part (w.inputs) that looks at each model forward's input tensor (called from the model's
    root pre-hook)."""

    def __init__(self, w: InputsWatcher, hash_rows: bool):
        self.w = w
        self.hash_rows = hash_rows
        self.nonfinite_input: dict | None = None
        self.input_stats: dict[str, Any] = {"n": 0, "max_abs_mean": 0.0, "max_std": 0.0, "scale_ratio": 0.0,
                                            "where": None, "max_abs": 0.0}
        self.train_hashes: set[int] = set()
        self.train_repeats = {"rows": 0, "repeats": 0, "done": False}  # repeats among the first training rows (see _hash_rows)
        self.eval_groups: list[dict] = []
        self.eval_group_open = False
        self._last_train_input: weakref.ref | None = None  # the last training forward's input tensor
        # root id -> the row hashes of its last forward with gradients on (its graph use decides later whether
        # it trained: checks/graph_uses.py)
        self.last_row_hashes: dict[int, list[int]] = {}
        self.reached_rows: set[int] = set()  # rows of forwards whose graph a backward() reached: trained on
        # cudnn-benchmark-varying-shapes (not in driven mode: the Trainer switches benchmark off itself):
        # per-sample input shapes of convolutional models' training forwards while cudnn.benchmark was True
        self.bench_shapes: dict[str, Any] = {"shapes": {}, "forwards": 0, "where": None, "device": None,
                                             "model": None}
        self.capture_overfit = False
        self.overfit_capture: dict | None = None

    def capture_for_overfit(self, module: nn.Module, args: tuple) -> None:
        """The first training forward: a copy of the model and its inputs, for the overfit-one-batch test."""
        import copy
        try:
            ours = (self.w, self.w.models, self)
            # our hooks must not drag the watcher along
            clone = copy.deepcopy(module, memo={id(o): o for o in ours})
            for m in clone.modules():
                for hooks in (m._forward_pre_hooks, m._forward_hooks):
                    for key in [k for k, h in hooks.items() if any(getattr(h, "__self__", None) is o for o in ours)]:
                        del hooks[key]
            self.overfit_capture = {"model": clone, "args": tuple(
                a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)}
        except Exception:
            self.overfit_capture = {}

    def hash_input(self, x: torch.Tensor, train: bool, root: int, others: tuple = ()) -> None:
        """A forward's input rows, hashed for the leak and repeat checks (training, or evaluation). `others`: the
        forward's other tensor inputs of the same batch size: a sample is all of its inputs (a table's
        categorical codes and its numbers, token ids and token types), not its first tensor alone, whose few
        distinct values would make every evaluated row look trained on."""
        if train:
            self._last_train_input = weakref.ref(x)
        elif self._last_train_input is not None and self._last_train_input() is x:
            return  # the batch the last step trained on, looked at again (a reconstruction shown at the
            #         end of an epoch): not an evaluation of the model on training data
        self._hash_rows(x, train, root, others)

    def note_sample_shape(self, info: RootInfo, args: tuple, x: torch.Tensor) -> None:
        """A training forward of a convolutional model with cudnn.benchmark on: the shape of its inputs
        without the batch dimension (a short last batch is not a new shape), and the step it first came in."""
        st = self.bench_shapes
        shapes = st["shapes"]
        key = sample_shape_key(args) or (tuple(x.shape[1:]),)  # x: the first tensor of a list argument
        if key not in shapes:
            if len(shapes) >= SAMPLE_SHAPES_KEPT or called_by_torchwise(2):
                return  # enough known; or the Trainer's own loop, which switches benchmark off by itself
            shapes[key] = self.w.steps
            if st["where"] is None:
                st.update(where=user_where(), device=x.device.type, model=info.label)
        st["forwards"] += 1

    def inspect_input(self, x: torch.Tensor, train: bool) -> None:
        if not x.is_floating_point() or x.numel() == 0:
            return
        with torch.no_grad():
            if not all_finite(x):
                if self.nonfinite_input is None:
                    self.nonfinite_input = {"step": self.w.steps, "n_nonfinite": int((~torch.isfinite(x)).sum()),
                                            "numel": x.numel(), "what": "inputs", "where": user_where()}
                return
            if not train or x.dim() < 2 or x.shape[0] < 2:
                return
            xf = x.float()
            st = self.input_stats
            st["n"] += 1
            st["max_abs_mean"] = max(st["max_abs_mean"], abs(float(xf.mean())))
            st["max_std"] = max(st["max_std"], float(xf.std()))
            st["max_abs"] = max(st["max_abs"], float(xf.abs().max()))
            if x.dim() == 2 and x.shape[1] >= 2 and x.shape[0] >= 8:
                s = xf.std(0)
                s = s[s > 1e-6]
                if s.numel() >= 2:
                    st["scale_ratio"] = max(st["scale_ratio"], float(s.max() / s.min()))
                    st["max_feature_std"] = max(st.get("max_feature_std", 0.0), float(s.max()))
            if st["where"] is None:
                st["where"] = user_where()

    def _hash_rows(self, x: torch.Tensor, train: bool, root: int, others: tuple = ()) -> None:
        rows = _row_array(x)
        if rows is None:
            return
        parts = [p for p in (_row_array(o) for o in others) if p is not None]
        if parts:  # one key per sample: the bytes of its row in every input
            rows = [b"".join(r.tobytes() for r in row) for row in zip(rows, *parts)]
        if train:
            self.eval_group_open = False
            hashes = [hash((root, _row_bytes(r))) for r in rows]
            self.last_row_hashes[root] = hashes[:1024]
            probe = self.train_repeats
            if not probe["done"]:
                # within the first pass over the training data (it ends with its loader, or at the first
                # evaluation): how often a sample repeats by itself (a tiny input space, a generator);
                # evaluation samples match training ones at that rate by chance
                probe["done"] = probe["rows"] >= TRAIN_REPEAT_PROBE or bool(self.eval_groups) or \
                    any(p.closed and p.steps for p in self.w.loaders.passes)
                if not probe["done"]:
                    probe["rows"] += len(hashes)
                    probe["repeats"] += sum(h in self.train_hashes for h in hashes)
            if len(self.train_hashes) < 500_000:
                self.train_hashes.update(hashes)
        else:
            cur = self.w.loaders.cur_pass if self.w.loaders.cur_pass is not None and not self.w.loaders.cur_pass.closed else None
            key = cur.index if cur is not None else None
            if not self.eval_group_open or not self.eval_groups or self.eval_groups[-1]["key"] != key:
                self.eval_groups.append({"key": key, "hashes": [], "where": user_where(), "step": self.w.steps,
                                         "root": root,
                                         "dataset": id(getattr(cur.loader, "dataset", None)) if cur else None,
                                         "loader": id(cur.loader) if cur else None})
                self.eval_group_open = True
            group = self.eval_groups[-1]
            if len(group["hashes"]) < 100_000:
                hashes = [hash((root, _row_bytes(r))) for r in rows]
                group["hashes"].extend(hashes)
                # rows already trained on when they were evaluated: a sample first evaluated and trained on
                # only later was collected, not validated (a policy's rollout, then its update on that rollout)
                group["trained_before"] = group.get("trained_before", 0) + sum(h in self.train_hashes for h in hashes)


def _row_array(x: Any):
    """A batch's rows as a 2-D numpy array (large samples thinned to 2048 values), or None for other dtypes."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or (
            not x.is_floating_point() and x.dtype not in (torch.int64, torch.int32, torch.uint8)):
        return None
    rows = x.detach()
    if rows.device.type != "cpu":
        rows = rows.cpu()
    if rows.dtype in (torch.bfloat16, torch.float16):
        rows = rows.float()  # numpy has no bfloat16
    # numpy's view and slicing: torch's reshape and contiguous() copied the whole batch to keep a spread of it
    rows = rows.numpy()
    rows = rows.reshape(rows.shape[0], -1)
    if rows.shape[1] > 2048:  # large samples (images): a fixed spread of 2048 values identifies them
        rows = rows[:, :: rows.shape[1] // 2048]
    return rows


def _row_bytes(row: Any) -> bytes:
    return row if isinstance(row, bytes) else row.tobytes()
