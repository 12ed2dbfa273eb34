"""What each optimizer is trained on: the objective kind, decided from what the run does (never from names).

A detector that reads the loss curve ("the loss should go down", "the learning rate is too low") or the targets
("labels start at 1") is only right about some kinds of training: a policy-gradient surrogate, a GAN's two
losses, a contrastive loss against a moving queue or a DQN's TD error are not supposed to fall, and a GAN's
real/fake labels or a reconstruction target are no class labels. So the checker first finds out what it is
looking at (the kinds are listed in detectors/spec.py), from three pieces of evidence gathered in deep steps:

* where each loss function's target comes from (`target_source`): made by the script as a constant (a GAN's
  labels, a contrastive loss's class 0) or as arange(N) (CLIP's diagonal); computed from a model's output
  (a TD target, a teacher's soft labels, pseudo-labels); the model's own input (an autoencoder); or the data.
  Tensors computed from a model's output are followed through the torch calls the function mode sees;
* which terms make up each backward()'d loss: a walk of its autograd graph through sums, means and scalings
  down to the loss functions' outputs (each tagged with its target's source on its graph node), to a model's
  output used directly (`-log_prob * return`, `D(fake).mean()`), or to other terms; a term made of parameters
  alone is a regulariser and does not count;
* which optimizer stepped after those backward()s.

Objectives is one object the Watcher holds (w.objective); the function mode, the backward patch, the model
hooks and the step hooks hand it what they see, and the detectors ask it `kind(optimizer)` and `kinds()`.
"""
from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import torch
from torch.nn import functional as F

from torchwise.diagnose.bounded import put_newest
from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES

# loss functions and the position of their target argument (None: a metric loss over embeddings, no target)
LOSS_TARGET_ARG: dict[Any, int | None] = {
    F.cross_entropy: 1, F.nll_loss: 1, F.binary_cross_entropy: 1, F.binary_cross_entropy_with_logits: 1,
    F.mse_loss: 1, F.l1_loss: 1, F.smooth_l1_loss: 1, F.huber_loss: 1, F.kl_div: 1, F.poisson_nll_loss: 1,
    F.gaussian_nll_loss: 1, F.soft_margin_loss: 1, F.multilabel_soft_margin_loss: 1, F.multilabel_margin_loss: 1,
    F.multi_margin_loss: 1, F.hinge_embedding_loss: 1, F.ctc_loss: 1,
    F.triplet_margin_loss: None, F.triplet_margin_with_distance_loss: None, F.margin_ranking_loss: None,
    F.cosine_embedding_loss: None,
}
# calls whose result is a constant the script makes (a GAN's real/fake labels, a contrastive loss's zeros)
_FILL = {torch.zeros, torch.ones, torch.full, torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like,
         torch.Tensor.fill_, torch.Tensor.zero_, torch.Tensor.new_full, torch.Tensor.new_ones, torch.Tensor.new_zeros,
         torch.Tensor.new_empty}
_ARANGE = {torch.arange}
# calls that draw random noise (a generator's latent codes): a forward on it samples, it evaluates nothing
# (torch.normal(mean, std) is left out: over a model's outputs it is a policy's action, drawn at every env step)
_NOISE = {torch.randn, torch.rand, torch.randn_like, torch.rand_like, torch.Tensor.normal_, torch.Tensor.uniform_}
# calls that take a second tensor only for its shape, dtype or device: they do not carry its values
_SHAPE_ONLY = {torch.Tensor.view_as, torch.Tensor.type_as, torch.Tensor.expand_as, torch.Tensor.reshape_as,
               torch.Tensor.to, torch.Tensor.new_tensor, torch.rand_like, torch.randn_like, torch.randint_like}
# autograd nodes that only combine, scale, reduce or reshape terms: the walk goes through them
_COMBINE = {"AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "MulBackward0", "MulBackward1",
            "DivBackward0", "DivBackward1", "NegBackward0", "MeanBackward0", "MeanBackward1", "SumBackward0",
            "SumBackward1", "StackBackward0", "CatBackward0", "ViewBackward0", "ReshapeAliasBackward0",
            "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "CloneBackward0",
            "ToCopyBackward0", "ExpandBackward0", "AliasBackward0", "UnsafeViewBackward0", "IndexBackward0",
            "SelectBackward0"}
_WALK_NODES = 256
_KEEP = 20_000  # tensors followed at most (the oldest are forgotten first)
_TERM_KEY = "torchwise_term"
_OUT_KEY = "torchwise_out"


def _tensors(x: Any, depth: int = 0):
    if isinstance(x, torch.Tensor):
        yield x
    elif depth < 1 and isinstance(x, (list, tuple)):
        for item in x:
            yield from _tensors(item, depth + 1)
    elif depth < 1 and isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item, depth + 1)


def _tag_node(t: Any, key: str, value: str) -> None:
    node = getattr(t, "grad_fn", None)
    meta = getattr(node, "metadata", None)
    if isinstance(meta, dict):
        meta.setdefault(key, value)


class Objectives:
    """The evidence of what each optimizer is trained on, and the verdict (see the module doc)."""

    def __init__(self) -> None:
        # id(tensor) -> (ref, "model" | "model@<id>" | "fill" | "arange" | "noise" | "made")
        self.origin: dict[int, tuple[weakref.ref, str]] = {}
        self.input_ptrs: dict[int, None] = {}   # data_ptrs of floating tensors fed to the models (recent ones)
        self.pending: list[str] = []            # the kinds of the backward()s since the last optimizer step
        self.per_opt: dict[int, Counter] = {}   # id(optimizer) -> Counter of its backward()s' kinds
        self.opt_names: dict[int, str] = {}
        self.target_makers: set[int] = set()    # models whose no_grad train-mode output became a loss's target
        self.makers_noted = False               # some model's no_grad train-mode output has been tagged

    # ------------------------------------------------------------------ evidence

    def _remember(self, t: torch.Tensor, tag: str) -> None:
        if len(self.origin) >= _KEEP:
            for k in [k for k, (r, _) in self.origin.items() if r() is None]:
                del self.origin[k]
            if len(self.origin) >= _KEEP:
                for k in list(self.origin)[:_KEEP // 2]:
                    del self.origin[k]
        self.origin.pop(id(t), None)  # a reused id goes to the end, or the eviction above would drop it first
        self.origin[id(t)] = (weakref.ref(t), tag)

    def tag_of(self, t: torch.Tensor) -> str | None:
        rec = self.origin.get(id(t))
        if rec is None or rec[0]() is not t:
            return None
        del self.origin[id(t)]  # used again: kept longest (a GAN's labels made once before the loop)
        self.origin[id(t)] = rec
        return rec[1]

    def note_model_input(self, args: tuple, kwargs: dict | None = None) -> None:
        for t in list(_tensors(args))[:4] + list(_tensors(kwargs or {}))[:4]:
            if t.is_floating_point() and t.numel() > 1 and t.layout == torch.strided:  # (a sparse one has no data pointer)
                put_newest(self.input_ptrs, t.data_ptr(), None)

    def note_model_output(self, out: Any, maker: int | None = None) -> None:
        """maker: the id of the model that made `out` under no_grad in train mode; a loss target computed from it
        puts it in target_makers (its no_grad forwards make training targets, not evaluations)."""
        tag = "model" if maker is None else f"model@{maker}"
        self.makers_noted = self.makers_noted or maker is not None
        for t in _tensors(out):
            self._remember(t, tag)
            _tag_node(t, _OUT_KEY, "out")

    def on_call(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Any torch call in a deep step: follow what was computed from a model's output or made as a constant."""
        if func in _FILL:
            tag = "fill"
        elif func in _ARANGE:
            tag = "arange"
        elif func in _NOISE:
            tag = "noise"
        elif not self.origin:
            return
        else:
            # every torch call of a deep step comes here: plain loops, no generator or set unless a tag is found
            origin, tags, untagged = self.origin, None, False
            for a in (args[:1] if func in _SHAPE_ONLY else args):
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    rec = origin.get(id(t))
                    if rec is not None and rec[0]() is t:
                        tags = (tags or set()) | {rec[1]}
                    elif isinstance(t, torch.Tensor):
                        untagged = True
            if kwargs and func not in _SHAPE_ONLY:
                for t in kwargs.values():
                    rec = origin.get(id(t))
                    if rec is not None and rec[0]() is t:
                        tags = (tags or set()) | {rec[1]}
            if not tags:
                return
            tag = _combined(tags, untagged)
            if tag.startswith("model@") and torch.is_grad_enabled() and _carries_grad(args, kwargs):
                # a no_grad output combined with one that carries gradients (BYOL's target projection times the
                # online prediction, a frozen backbone's features into a trained head): its model makes what
                # training learns from, whatever loss the script wrote by hand
                self.target_makers.update(int(m) for m in tag[6:].split(","))
        for t in _tensors(out):
            self._remember(t, tag)

    def target_source(self, func: Any, args: tuple, kwargs: dict) -> str:
        """Where a loss function's target comes from: "metric" (no target), "constant" (a float the script made:
        real/fake labels), "constant-int" (a class the script made: a contrastive loss's 0), "index" (arange),
        "model", "input" or "data" (on_loss_term tells "tokens", a language model's, from "data")."""
        pos = LOSS_TARGET_ARG.get(func, 1)
        if pos is None:
            return "metric"
        target = args[pos] if len(args) > pos else kwargs.get("target")
        if not isinstance(target, torch.Tensor):
            return "data"
        tag = self.tag_of(target)
        if tag is not None and tag.startswith("model@"):
            self.target_makers.update(int(m) for m in tag[6:].split(","))
        if (tag is not None and tag.startswith("model")) or target.requires_grad:
            return "model"
        if tag in ("fill", "arange", "made"):
            flat = target.reshape(-1)
            if flat.numel() >= 2 and bool((flat == flat[0]).all()):
                return "constant" if target.is_floating_point() else "constant-int"
            # the values decide, the tag only says the script made them (a tag follows sampling and arithmetic too)
            if not target.is_floating_point() and target.dim() == 1 and torch.equal(
                    target.cpu(), torch.arange(target.numel())):
                return "index"
        if target.is_floating_point() and target.numel() > 1 and target.data_ptr() in self.input_ptrs:
            return "input"
        return "data"

    def on_loss_term(self, func: Any, args: tuple, kwargs: dict, out: Any, tokens: Any = None) -> str:
        """A loss function returned: tag its graph node with its target's source (the backward walk reads it).
        `tokens(inp, target)` says whether class targets from the data are token ids (a language model's)."""
        source = self.target_source(func, args, kwargs)
        if source == "data" and tokens is not None and func in (F.cross_entropy, F.nll_loss) and len(args) >= 2 \
                and isinstance(args[1], torch.Tensor) and not args[1].is_floating_point() and tokens(args[0], args[1]):
            source = "tokens"
        if isinstance(out, torch.Tensor):
            _tag_node(out, _TERM_KEY, source)
        return source

    def on_backward(self, loss: torch.Tensor) -> None:
        self.pending.append(classify(walk_terms(loss)))

    def on_step(self, opt: Any) -> None:
        if not self.pending:
            return
        self.per_opt.setdefault(id(opt), Counter()).update(self.pending)
        self.opt_names.setdefault(id(opt), type(opt).__name__)
        self.pending.clear()

    # ------------------------------------------------------------------ verdict

    def kind(self, opt_id: int) -> str:
        """The objective kind of one optimizer: its backward()s' most common kind, except that a kind with no
        fixed target wins once it is a quarter of them (a supervised auxiliary loss does not make a GAN's
        discriminator supervised)."""
        counts = self.per_opt.get(opt_id)
        if not counts:
            return "unknown"
        total = sum(counts.values())
        loose = [(n, k) for k, n in counts.items() if k not in FIXED_OBJECTIVES and k != "unknown" and 4 * n >= total]
        if loose:
            return max(loose)[1]
        known = [(n, k) for k, n in counts.items() if k != "unknown"]
        return max(known)[1] if known else "unknown"

    def kinds(self) -> dict[int, str]:
        return {oid: self.kind(oid) for oid in self.per_opt}

    def all_fixed(self) -> bool:
        """Whether every optimizer classified is trained on a fixed objective (False when none was)."""
        ks = self.kinds()
        return bool(ks) and all(k in FIXED_OBJECTIVES for k in ks.values())

    def any_fixed(self) -> bool:
        return any(k in FIXED_OBJECTIVES for k in self.kinds().values())

    def not_judged(self, judged: str | None = None) -> str:
        """Why a detector does not judge this run: no optimizer is trained on an objective it judges (`judged`: those
        kinds; by default a detector of the loss curve's, the fixed objectives)."""
        kinds = self.summary()
        if not kinds:
            return ("no backward() was looked at closely enough to tell what the loss is (a loss function against "
                    "targets from the data, or something else)")
        said = ", ".join(f"{name}: {kind}" for name, kind in kinds.items())
        if judged is not None:
            return f"it judges {judged} objectives, and this run's is not one ({said})"
        return f"the objective is not a fixed supervised loss ({said})"

    def summary(self) -> dict[str, str]:
        """For the coverage report: optimizer label -> objective kind."""
        out: dict[str, str] = {}
        for i, (oid, kind) in enumerate(self.kinds().items()):
            out[f"{self.opt_names.get(oid, 'optimizer')} #{i + 1}"] = kind
        return out


# --------------------------------------------------------------------------- the backward walk

def walk_terms(loss: torch.Tensor) -> list[str]:
    """The terms a backward()'d loss is made of: each loss function's target source, "direct" for a model
    output used as is, "other" for anything else; parameter-only terms (regularisers) are left out."""
    root = loss.grad_fn
    if root is None:
        return []
    terms: list[str] = []
    stack, seen, budget = [root], set(), _WALK_NODES
    while stack and budget > 0:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        budget -= 1
        meta = getattr(node, "metadata", None)
        if isinstance(meta, dict) and _TERM_KEY in meta:
            terms.append(meta[_TERM_KEY])
            continue
        if isinstance(meta, dict) and _OUT_KEY in meta:
            terms.append("direct")
            continue
        name = type(node).__name__
        if name == "AccumulateGrad":
            continue  # a parameter used directly (a regulariser's sum of squares ends here)
        if name in _COMBINE:
            stack.extend(n for n, _ in node.next_functions)
            continue
        terms.append("regulariser" if _params_only(node) else "other")
    return [t for t in terms if t != "regulariser"]


# operations of a layer's forward (they mix parameters with inputs): a subgraph holding one is a model's output,
# not a regulariser, even where no model output was tagged (a model whose forward() is never called)
_LAYER_OPS = {"AddmmBackward0", "MmBackward0", "BmmBackward0", "MvBackward0", "ConvolutionBackward0",
              "EmbeddingBackward0", "LinearBackward0", "NativeLayerNormBackward0", "NativeBatchNormBackward0",
              "CudnnBatchNormBackward0", "MkldnnConvolutionBackward0", "UnsafeViewBackward0"}


def _params_only(node, budget: int = 48) -> bool:
    """Whether a subgraph reaches only parameters (no model output, no loss term, no layer's operation) within
    `budget` nodes: a regulariser such as `l2 * sum(p.pow(2).sum() for p in params)`."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        budget -= 1
        if budget < 0:
            return False
        meta = getattr(n, "metadata", None)
        if isinstance(meta, dict) and (_TERM_KEY in meta or _OUT_KEY in meta) or type(n).__name__ in _LAYER_OPS:
            return False
        stack.extend(m for m, _ in n.next_functions)
    return True


def _carries_grad(args: tuple, kwargs: dict) -> bool:
    for a in (*args, *(kwargs or {}).values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    return False


def _combined(tags: set[str], untagged: bool) -> str:
    """The tag of what a call computes from tensors with these tags: every model whose no_grad output went into it
    ("model@<id>,<id>": a target made from an actor's and a critic's outputs names both), else "model"; noise
    when it is made of noise and other things the script made only (a latent code with its one-hot labels; noise
    added to data is data); "fill"/"arange" when made of those alone; else "made"."""
    if len(tags) == 1:  # (most tagged calls: one tag goes through as it is)
        tag = next(iter(tags))
        return "made" if tag == "noise" and untagged else tag
    makers = sorted({m for t in tags if t.startswith("model@") for m in t[6:].split(",")})
    if makers:
        return "model@" + ",".join(makers)
    if "model" in tags:
        return "model"
    if tags == {"fill"} or tags == {"arange"}:
        return next(iter(tags))
    return "noise" if "noise" in tags and not untagged else "made"


def classify(terms: list[str]) -> str:
    """One backward()'s objective kind from its terms (see detectors/spec.py for the kinds)."""
    if not terms:
        return "unknown"
    s = set(terms)
    if "model" in s:
        return "bootstrapped"
    if s & {"index", "metric", "constant-int"}:
        return "contrastive"
    if "constant" in s:
        return "adversarial"
    if s & {"direct", "other"}:
        return "generative" if "input" in s else "custom"
    if "input" in s:
        return "reconstruction"
    return "language-model" if s == {"tokens"} else "supervised"
