"""The learning-rate finder: sweep the learning rate exponentially, watch the loss, put everything back.

The seed articles' procedure ("it doesn't converge: sweep the learning rate and plot loss against
it") run for the user, with the three things a hand-written sweep usually gets wrong done right:

- the loss is smoothed, so one noisy batch does not decide the answer. Divergence is watched on a
  running (causal) exponential moving average with bias correction; the curve that is shown and
  from which the suggestions are read is the same average run forwards and then backwards, which
  has no lag: a one-sided average shifts the whole curve towards larger learning rates (by about
  a decade with the usual 0.98) and so inflates the suggestion;
- the sweep stops as soon as the loss diverges (running loss above `diverge` times its best),
  instead of training garbage for the remaining steps;
- the model (parameters AND buffers such as BatchNorm statistics), the optimizer state, the
  scheduler state, the gradients, the train/eval mode and every RNG are restored afterwards, so
  `lr_find()` followed by `fit()` trains exactly as `fit()` alone would.

Each sweep step is the Trainer's own step body (`StepRunner.body` in train/step/body.py: autocast,
GradScaler, accumulation, clipping, the finite check): the curve describes the training that will
actually run.

Two suggestions are computed and both are shown:
- "steepest": where the smoothed loss falls fastest against log(lr);
- "min/10": one tenth of the learning rate at the loss minimum (the seed article's rule).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from torchwise.errors import ConfigError, TorchwiseError

RULES = ("steepest", "min10")


@dataclass
class LRFindResult:
    lrs: list[float]                 # learning rate of each sweep step
    losses: list[float]              # smoothed loss (zero-lag) at each step
    raw_losses: list[float]          # the step's own loss
    steepest_lr: float | None        # fastest descent of the smoothed loss (None: curve too short)
    min_loss_lr: float               # learning rate at the smoothed-loss minimum
    min10_lr: float                  # min_loss_lr / 10
    rule: str                        # which of the two is `suggested_lr`
    stop_reason: str                 # "diverged at lr=..." | "reached end_lr" | "non-finite loss at lr=..."
    plot_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def suggested_lr(self) -> float:
        if self.rule == "steepest" and self.steepest_lr is not None:
            return self.steepest_lr
        return self.min10_lr

    def to_dict(self) -> dict[str, Any]:
        return {"suggested_lr": self.suggested_lr, "rule": self.rule, "steepest_lr": self.steepest_lr,
                "min_loss_lr": self.min_loss_lr, "min10_lr": self.min10_lr, "stop_reason": self.stop_reason,
                "steps": len(self.lrs), "lrs": self.lrs, "losses": self.losses, "raw_losses": self.raw_losses,
                "plot": str(self.plot_path) if self.plot_path else None, "notes": self.notes}

    def report(self) -> str:
        steep = f"{self.steepest_lr:.3g}" if self.steepest_lr is not None else "n/a (curve too short)"
        lines = [f"lr-find: {len(self.lrs)} steps from {self.lrs[0]:.3g} to {self.lrs[-1]:.3g}; {self.stop_reason}",
                 f"  steepest descent      lr = {steep}" + ("   <- suggested" if self.rule == "steepest"
                                                             and self.steepest_lr is not None else ""),
                 f"  minimum loss          lr = {self.min_loss_lr:.3g}  (smoothed loss "
                 f"{min(self.losses):.4g})",
                 f"  min/10 (seed's rule)  lr = {self.min10_lr:.3g}" + ("   <- suggested"
                                                                          if self.suggested_lr == self.min10_lr
                                                                          else "")]
        lines += [f"  note: {n}" for n in self.notes]
        if self.plot_path:
            lines.append(f"  plot: {self.plot_path}")
        return "\n".join(lines)

    def plot(self, path: str | Path) -> Path:
        """Loss against learning rate (log scale), both suggestions marked; a PNG drawn with Agg."""
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(7, 4.2))
        finite = [(lr, raw) for lr, raw in zip(self.lrs, self.raw_losses) if math.isfinite(raw)]
        if finite:
            ax.plot(*zip(*finite), color="#bbbbbb", linewidth=0.8, label="loss (raw)")
        ax.plot(self.lrs, self.losses, color="#1f77b4", linewidth=2, label="loss (smoothed)")
        marks = [("min/10", self.min10_lr, "#2ca02c")]
        if self.steepest_lr is not None:
            marks.insert(0, ("steepest", self.steepest_lr, "#d62728"))
        for name, lr, color in marks:
            chosen = lr == self.suggested_lr
            ax.axvline(lr, color=color, linestyle="-" if chosen else "--", linewidth=2 if chosen else 1,
                       label=f"{name}: {lr:.2g}" + (" (suggested)" if chosen else ""))
            ax.plot([lr], [_interp(self.lrs, self.losses, lr)], "o", color=color, markersize=8 if chosen else 5)
        ax.set_xscale("log")
        low, high = min(self.losses), _best_plot_top(self.losses)
        ax.set_ylim(low - 0.05 * (high - low + 1e-12), high)
        ax.set_xlabel("learning rate")
        ax.set_ylabel("training loss")
        ax.set_title(f"LR finder: suggested lr = {self.suggested_lr:.3g} ({self.rule})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        from torchwise import files

        with files.atomic_write_path(path) as tmp:  # a link at `path` is replaced, never written through
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        self.plot_path = path
        return path


def _best_plot_top(losses: list[float]) -> float:
    # A diverging tail would squash the interesting part of the curve into a flat line.
    start = losses[0]
    return max(start, min(max(losses), start + 2 * (start - min(losses)) + 1e-12))


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    logs = [math.log(v) for v in xs]
    lx = math.log(x)
    if lx <= logs[0]:
        return ys[0]
    for i in range(1, len(logs)):
        if lx <= logs[i]:
            t = (lx - logs[i - 1]) / (logs[i] - logs[i - 1] or 1.0)
            return ys[i - 1] + t * (ys[i] - ys[i - 1])
    return ys[-1]


# ----------------------------------------------------------------------------- state save / restore


def _to_cpu(obj: Any) -> Any:
    """A deep copy with every tensor copied to the CPU (always a copy, also for CPU tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


class _Snapshot:
    """Everything a sweep changes, captured before and put back after (also on error)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: Any):
        from torchwise.train.state.reproducibility import capture_rng_state

        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        # Copies on the CPU: state_dict() returns the live tensors, which the sweep is about to change in
        # place, and a second copy of weights and optimizer state on the GPU could itself run out of memory.
        self.weights = {k: _to_cpu(v.detach()) for k, v in model.state_dict(keep_vars=True).items()}
        self.grads = {p: (_to_cpu(p.grad.detach()) if p.grad is not None else None) for p in model.parameters()}
        self.optimizer_state = _to_cpu(optimizer.state_dict())  # load_state_dict moves it back to the params
        self.scheduler_state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None
        self.training = {m: m.training for m in model.modules()}
        self.rng = capture_rng_state()

    def restore(self) -> None:
        from torchwise.train.state.reproducibility import restore_rng_state

        with torch.no_grad():
            for key, value in self.model.state_dict(keep_vars=True).items():
                value.copy_(self.weights[key])
        for p, g in self.grads.items():
            p.grad = g.to(p.device) if g is not None else None
        self.optimizer.load_state_dict(self.optimizer_state)  # also drops state the sweep created
        if self.scheduler is not None:
            self.scheduler.load_state_dict(self.scheduler_state)
        for module, mode in self.training.items():
            module.training = mode
        restore_rng_state(self.rng)


# ----------------------------------------------------------------------------- the sweep


def _check_args(start_lr: float, end_lr: float, num_steps: int, smoothing: float, diverge: float, rule: str) -> None:
    ok = (0 < start_lr < end_lr and num_steps >= 5 and 0 <= smoothing < 1 and diverge > 1 and rule in RULES)
    if not ok:
        raise TorchwiseError("Bad lr-find settings.",
                             values={"start_lr": start_lr, "end_lr": end_lr, "num_steps": num_steps,
                                     "smoothing": smoothing, "diverge": diverge, "rule": rule},
                             fix="Need 0 < start_lr < end_lr, num_steps >= 5, 0 <= smoothing < 1, diverge > 1, "
                                 f"rule in {RULES}; the defaults (1e-7, 10, 100, 0.9, 4, 'steepest') suit most runs.")


def sweep(
    step: Callable[[], Any],
    optimizer: torch.optim.Optimizer,
    *,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    num_steps: int = 100,
    smoothing: float = 0.9,
    diverge: float = 4.0,
    rule: str = "steepest",
) -> LRFindResult:
    """The sweep itself: before each call of `step()` (one optimizer step returning a StepResult or a
    float loss) every param group's lr is set; relative lrs between groups are kept."""
    _check_args(start_lr, end_lr, num_steps, smoothing, diverge, rule)
    base = [g["lr"] for g in optimizer.param_groups]
    ratios = [b / base[0] if base[0] else 1.0 for b in base]
    factor = (end_lr / start_lr) ** (1.0 / (num_steps - 1))
    lrs: list[float] = []
    smooth: list[float] = []
    raw: list[float] = []
    avg, best = 0.0, math.inf
    stop = f"reached end_lr={end_lr:g}"
    notes: list[str] = []
    skipped = 0
    for i in range(num_steps):
        lr = start_lr * factor ** i
        for group, ratio in zip(optimizer.param_groups, ratios):
            group["lr"] = lr * ratio
        result = step()
        loss = float(getattr(result, "loss", result))
        reason = getattr(result, "skipped", None)
        if not math.isfinite(loss):
            stop = f"non-finite loss at lr={lr:.3g}"
            break
        if reason:  # an fp16 overflow: the loss is real, the update did not happen
            skipped += 1
        avg = smoothing * avg + (1 - smoothing) * loss
        value = avg / (1 - smoothing ** (len(smooth) + 1))
        lrs.append(lr)
        raw.append(loss)
        smooth.append(value)
        best = min(best, value)
        if len(smooth) > 5 and value > diverge * best:
            stop = f"diverged at lr={lr:.3g} (smoothed loss {value:.4g} > {diverge:g} x best {best:.4g})"
            break
    if len(smooth) < 3:
        raise TorchwiseError("The learning-rate sweep stopped before it could say anything.",
                             values={"steps done": len(smooth), "reason": stop, "start_lr": start_lr},
                             fix="Lower start_lr (e.g. 1e-8) and check that the loss is finite at a tiny learning "
                                 "rate: a nan loss there means the data or the model are broken, not the lr.")
    if skipped:
        notes.append(f"{skipped} step(s) skipped for fp16 gradient overflow")
    shown = zero_lag_smooth(raw, smoothing)
    steepest, min_lr = suggest(lrs, shown)
    if steepest is None:
        notes.append("the loss only rose: no descent to measure; start_lr may already be too high")
    return LRFindResult(lrs, shown, raw, steepest, min_lr, min_lr / 10.0, rule, stop, notes=notes)


def _ema(values: list[float], beta: float) -> list[float]:
    out, avg = [], 0.0
    for i, v in enumerate(values):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta ** (i + 1)))  # bias correction: the average starts at 0
    return out


def zero_lag_smooth(values: list[float], beta: float) -> list[float]:
    """The bias-corrected moving average run forwards, then backwards over the result: no lag."""
    return _ema(_ema(values, beta)[::-1], beta)[::-1]


def suggest(lrs: list[float], losses: list[float]) -> tuple[float | None, float]:
    """(steepest-descent lr, lr at the minimum) of a smoothed loss curve."""
    import numpy as np

    y = np.asarray(losses, dtype=np.float64)
    x = np.log10(np.asarray(lrs, dtype=np.float64))
    i_min = int(np.argmin(y))
    # Only the part before the minimum counts: after it the loss rises for good.
    if i_min < 3:
        return None, lrs[i_min]
    slope = np.gradient(y[: i_min + 1], x[: i_min + 1])
    # The first steps carry the smoothing's start-up; skip a few unless the curve is short.
    skip = min(len(slope) // 10, 5)
    i_steep = skip + int(np.argmin(slope[skip:]))
    if slope[i_steep] >= 0:
        return None, lrs[i_min]
    return lrs[i_steep], lrs[i_min]


def lr_find(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[..., torch.Tensor],
    train_data: Any,
    *,
    batch_size: int = 32,
    accumulate: int = 1,
    precision: str = "auto",
    device: str | torch.device = "auto",
    clip_grad_norm: float | None = None,
    scheduler: Any = None,
    seed: int = 0,
    num_workers: int | str = "auto",
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    num_steps: int = 100,
    smoothing: float = 0.9,
    diverge: float = 4.0,
    rule: str = "steepest",
    plot: str | Path | None = None,
) -> LRFindResult:
    """Sweep the learning rate on `train_data` (a Dataset or DataLoader) and put everything back.

    `scheduler` (a torch lr scheduler, optional) has its state restored too. `plot`: a PNG path.
    """
    from torchwise.train.step.precision import Precision, choose_device, choose_precision

    dev = choose_device(device)
    prec = precision if isinstance(precision, Precision) else choose_precision(precision, dev)
    model.to(dev)
    loader = _build_loader(train_data, dev, batch_size, seed, num_workers)
    return _run(model, optimizer, loss_fn, loader, prec, dev, clip_grad_norm, scheduler, accumulate,
                dict(start_lr=start_lr, end_lr=end_lr, num_steps=num_steps, smoothing=smoothing, diverge=diverge,
                     rule=rule), plot)


def run_lr_find(trainer: Any, *, plot: str | Path | None = None, **kwargs: Any) -> LRFindResult:
    """`Trainer.lr_find()`: the sweep with the Trainer's own model, optimizer, loss, data, batch size,
    accumulation, precision, device and clipping. The Trainer is left as it was (fit() may follow)."""
    _check_names(kwargs)
    trainer.setup.setup_basics()
    optimizer = trainer.optimizer or trainer.setup.build_optimizer()
    schedule = trainer.schedule
    loader = _build_loader(trainer.train_data, trainer.device, trainer.batch_size, trainer.seed, trainer.num_workers)
    if plot is None and getattr(trainer, "out_dir", None) is not None:
        plot = Path(trainer.out_dir) / "lr_find.png"
    return _run(trainer.model, optimizer, trainer.contract, loader, trainer.precision, trainer.device,
                trainer.clip_grad_norm, schedule.scheduler if schedule is not None else None, trainer.accumulate,
                kwargs, plot, augment=getattr(trainer, "batch_augment", None))


SWEEP_SETTINGS = ("start_lr", "end_lr", "num_steps", "smoothing", "diverge", "rule")


def _check_names(settings: dict[str, Any]) -> None:
    """Trainer.lr_find(**settings) takes the sweep's settings: a misspelt one is named, with the choices."""
    import difflib

    for name in settings:
        if name not in SWEEP_SETTINGS:
            close = difflib.get_close_matches(name, SWEEP_SETTINGS, n=1)
            raise ConfigError(f"Unknown lr_find setting {name!r}.",
                              values={"setting": name, "did you mean": close[0] if close else "-",
                                      "settings": ", ".join(SWEEP_SETTINGS + ("plot",))},
                              fix="Use one of the settings listed; the model, optimizer, data, batch size and "
                                  "precision are the Trainer's own.")


def _build_loader(data: Any, device: torch.device, batch_size: int, seed: int, num_workers: int | str):
    from torchwise.train.state.loaders import build_loader

    return build_loader(data, role="train_data", train=True, device=device, batch_size=batch_size, seed=seed,
                        num_workers=num_workers)


def _micro_batches(loader: Any, device: torch.device, accumulate: int, contract: Any, augment: Any = None
                   ) -> Iterator[list]:
    """Endless: epochs follow each other, so a short data set still gives a full sweep. `augment`: the
    Trainer's batch_augment (the sweep must see the inputs training sees)."""
    from torchwise.train.step.batches import move_to

    generator = torch.Generator(device=device).manual_seed(0) if augment is not None else None
    epoch = 0
    while True:
        got_any = False
        micro = []
        for batch in loader.epoch_iter(epoch):
            got_any = True
            inputs, target = contract.parts(move_to(batch, device, device.type == "cuda"))
            if augment is not None and contract.positional(inputs):
                inputs = (augment(inputs[0], generator), *inputs[1:])
            micro.append((inputs, target, contract.size(inputs, target)))
            if len(micro) == accumulate:
                yield micro
                micro = []
        if micro:
            yield micro
        if not got_any:
            raise TorchwiseError("train_data yields no batches.", fix="Check the data set and the batch size.")
        epoch += 1


def _run(model, optimizer, loss_fn, loader, precision, device, clip, scheduler, accumulate, settings, plot,
         augment=None):
    from torchwise.train.step.contract import StepContract
    from torchwise.train.step.body import StepRunner

    _check_args(settings.get("start_lr", 1e-7), settings.get("end_lr", 10.0), settings.get("num_steps", 100),
                settings.get("smoothing", 0.9), settings.get("diverge", 4.0), settings.get("rule", "steepest"))
    contract = loss_fn if isinstance(loss_fn, StepContract) else StepContract(loss_fn, loss_given=True)
    contract.model_for_keys = contract.model_for_keys or model
    runner = StepRunner(model, optimizer, contract, precision, device, clip)
    snapshot = _Snapshot(model, optimizer, scheduler, runner.scaler)
    batches = _micro_batches(loader, device, accumulate, contract, augment)
    try:
        model.train()
        result = sweep(lambda: runner.run(next(batches), measure_norm=False), optimizer, **settings)
    finally:
        snapshot.restore()
    if plot is not None:
        result.plot(plot)
    return result
