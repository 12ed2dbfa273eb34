"""Which layers' outputs anything reads: the evidence that tells a cut graph from a layer computed for nothing.

A layer whose parameters never get a gradient although it ran is either cut from the loss (its output went
through .detach(), .item(), .data: a mistake, the layer should learn) or computed for nothing (nothing ever read
its output: a network's head when a forward hook takes the features before it, as BYOL's NetWrapper does; harmless
but for the compute). The same holds for a parameter no operation ever took (made for an option that is off).
Only the function mode sees every read, so outputs are noted only while it analyses calls (grad-enabled forwards
of deep steps that are not light); a layer never noted is never called unread, and without analysed calls no
parameter is called unread.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

_Parameter = torch.nn.Parameter
_KEEP = 2048  # outputs waiting for a reader: a forward's layers, a few steps' worth


class OutputReads:
    """The Watcher's record (w.models.outputs) of layer outputs made and read."""

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[weakref.ref, int]] = {}  # id(output) -> (its ref, id(layer))
        self.made: set[int] = set()   # layers whose output was noted
        self.read: set[int] = set()   # layers some torch call read the output of
        self.params_read: set[int] = set()  # parameters some analysed torch call took as an argument

    def made_by(self, layer_id: int, out: Any) -> None:
        if layer_id in self.read:
            return  # known to be read: nothing more to learn
        waiting = self.waiting
        if len(waiting) >= _KEEP:
            for key in [k for k, (ref, _) in waiting.items() if ref() is None] or list(waiting)[:_KEEP // 2]:
                del waiting[key]
        tensors = (out,) if isinstance(out, torch.Tensor) else out if isinstance(out, (list, tuple)) else ()
        for t in tensors[:4]:
            if isinstance(t, torch.Tensor):
                waiting[id(t)] = (weakref.ref(t), layer_id)
        self.made.add(layer_id)

    def on_call(self, args: tuple, kwargs: dict, in_forward: bool) -> None:
        """A torch call the function mode analysed: its tensor arguments are read. Parameters count inside a
        model's forward only (a layer's weight by F.linear, an LSTM's flat weights in their list, a parameter
        indexed or read through .data); registering and initialising them reads them too, outside any forward."""
        waiting, params = self.waiting, self.params_read
        if not waiting and not in_forward:
            return
        for a in (*args, *kwargs.values()) if kwargs else args:
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if in_forward and isinstance(t, _Parameter):  # (subclasses too: quantised, sharded)
                    params.add(id(t))
                rec = waiting.get(id(t))
                if rec is not None and rec[0]() is t:
                    self.read.add(rec[1])
                    del waiting[id(t)]

    def never_read(self, param_id: int) -> bool:
        """Forwards were analysed and none took this parameter as an argument: it computes nothing (a parameter
        made for an option that is off: GIN's eps without --learn_eps)."""
        return bool(self.params_read) and param_id not in self.params_read

    def unread(self, layer_id: int) -> bool:
        """The layer's output was noted and nothing ever read it."""
        return layer_id in self.made and layer_id not in self.read
