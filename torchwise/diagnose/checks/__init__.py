"""Detectors, one module per family. Each `decide(watcher)` turns the watcher's evidence into findings.

    losses.py  what goes into the loss: softmax/sigmoid before it, labels, classes, the loss for the task
    optim.py   optimizer steps: zero_grad, learning rate, exploding/vanishing gradients, backward/step under autocast
    model.py   modes, registration, gradient flow, dead ReLU, NaNs, the loss curve, retained graphs
    data.py    loaders and batches: validation augmentation, shuffling, samplers, speed, BatchNorm,
               input shapes that change under cudnn.benchmark; with two parts of its own that only it calls:
               overlap.py (train/val overlap) and loss_average.py (the printed epoch loss's count)
    calls.py   library calls (diagnose/probes.py): LR schedulers, gradient clipping, GradScaler, DDP sampling

Shared by the families above (each imports only these, never another family):

    step_record.py   the optimizer steps' record: update sizes, step order, model inputs, the loss summary
    followed.py      tensors followed from the models' outputs: accuracy comparisons, token ids, row masks
    symmetry.py      symmetric-init's evidence (deep steps) and its decision
    accumulation.py  accumulation-unscaled's evidence (the backward patch) and its decision
    graph_uses.py    whether a backward() reaches each model output's graph: evaluation recognised by what
                     happens to the output (eval-without-no-grad, eval-mode-missing of a predict() function)
"""
from __future__ import annotations

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import fits
from torchwise.diagnose.detectors import ORDER, REGISTRY
from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, FIXED_OBJECTIVES, LABELLED_TARGETS

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _families():
    from torchwise.diagnose.checks import calls, data, losses, model, optim
    return {"losses": losses, "optim": optim, "model": model, "data": data, "calls": calls}


def decide_all(w) -> list[Finding]:
    """Every detector's findings, then what the registry says of them: a detector of the loss curve says
    nothing where no optimizer is trained on a fixed objective; a pattern that needs harm to warn is an info
    hint where this run shows none; a finding explained by another one (its cause) is left out."""
    from torchwise.diagnose.checks.step_record import loss_summary
    fam = _families()
    try:
        ls = loss_summary(w)
    except Exception as exc:  # a detector's failure is the checker's bug: counted and shown, never the script's
        w.health.internal_error("loss summary", exc)
        ls = {"n": 0, "first_bad": None, "first_bad_step": None, "finite": [], "learned": False}
    found: list[Finding] = []
    for name, module in fam.items():
        try:
            found += module.decide(w, ls) if name in ("optim", "model") else module.decide(w)
        except Exception as exc:
            w.health.internal_error(f"detectors in checks/{name}.py", exc)
    if not w.objective.any_fixed():
        found = [f for f in found if REGISTRY[f.id].applies_to != FIXED_OBJECTIVES]
    kinds = _run_kinds(w)
    found = [f for f in found if _applies(REGISTRY[f.id], kinds)]
    found = _apply_harm(w, found)
    found = fits.hint_when_search_cut_short(w, found)
    found = _drop_consequences(found)
    seen, unique = set(), []
    for f in found:
        key = (f.id, f.where)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    unique.sort(key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), ORDER.index(f.id)))
    return unique


def _apply_harm(w, found: list[Finding]) -> list[Finding]:
    """A warning of a detector that needs harm (its harm_seen) stays a warning only where this run shows it."""
    ids = {f.id for f in found if f.counts}
    for f in found:
        det = REGISTRY[f.id]
        if f.counts and det.harm_seen is not None:
            try:
                harmed = det.harm_seen(f, ids - {f.id}, w)
            except Exception as exc:
                w.health.internal_error(f"harm_seen of {f.id}", exc)
                harmed = True
            if not harmed:
                f.severity, f.maybe_fine = "info", det.maybe_fine
    return found


def _run_level(det) -> bool:
    """Whether a detector's objectives are checked against the run's (every optimizer's kind): not for one of every
    objective, nor for one of labelled targets, which judges each loss call by where its targets come from."""
    return det.applies_to not in (ALL_OBJECTIVES, LABELLED_TARGETS)


def _run_kinds(w) -> set[str]:
    """The objective kinds of the run's optimizers (none classified: unknown), worked out once per decision."""
    return set(w.objective.kinds().values()) or {"unknown"}


def _applies(det, kinds: set[str]) -> bool:
    """A detector judges a run only where some optimizer is trained on an objective it declares (none classified:
    unknown, where only the detectors of every objective judge)."""
    return not _run_level(det) or bool(det.applies_to & kinds)


# Detectors that need an evaluation pass to judge anything.
_NEEDS_EVAL = ("eval-mode-missing", "train-val-overlap", "val-augmentation")


def undecided(w) -> dict[str, str]:
    """Mistake id -> why its detector could not judge this run (shown with the coverage, never as clean)."""
    out: dict[str, str] = {}
    if w.steps == 0:
        return {"*": "no optimizer step was seen: nothing about training could be judged"}
    if not w.loaders.eval_seen:
        why = (f"no evaluation was seen before check stopped the script ({w.health.stop_reason}; --max-steps 0 runs it "
               "to the end)" if w.health.stop_reason else "the script ran no evaluation that check could recognise")
        for i in _NEEDS_EVAL:
            out[i] = why
    for name, module in _families().items():
        fn = getattr(module, "undecided", None)
        if fn is None:
            continue
        try:
            out.update(fn(w))
        except Exception as exc:
            w.health.internal_error(f"undecided() in checks/{name}.py", exc)
    if not w.objective.any_fixed():
        for det in REGISTRY.values():
            if det.applies_to == FIXED_OBJECTIVES and det.id != "cannot-overfit-batch":
                out.setdefault(det.id, w.objective.not_judged())
    kinds = _run_kinds(w)
    for det in REGISTRY.values():
        if det.applies_to != FIXED_OBJECTIVES and not _applies(det, kinds):
            out.setdefault(det.id, w.objective.not_judged(", ".join(sorted(det.applies_to))))
    return out


def coverage(w, *, workers: list[dict], stop_reason: str | None, internal_errors: int) -> dict:
    """What the run let the checker see: a clean verdict means something only next to this."""
    eval_passes = sum(1 for p in w.loaders.passes if p.closed and p.is_eval)
    worker_steps = sum(int(s.get("steps", 0)) for s in workers)
    cov = {
        "optimizer_steps": w.steps + worker_steps,
        "manual_update_steps": w.optim_steps.manual_steps,
        "backward_calls": w.loss_watch.backwards,
        "models": [r.label for r in w.models.roots.values()],
        "optimizers": [type(o).__name__ for o in w.optim_steps.optimizers],
        "evaluation_passes": eval_passes,
        # forwards under no_grad or in an evaluation pass (a validation loop run with gradients on counts)
        "evaluation_forwards": max(w.models.eval_forwards, sum(p.fwd_train_mode + p.fwd_eval_mode for p in w.loaders.passes
                                                        if p.closed and p.is_eval)),
        "processes_followed": len(workers),
        "processes": [{"label": s.get("label"), "steps": s.get("steps", 0),
                       "findings": len(s.get("findings", []))} for s in workers],
        "stopped": stop_reason,
        "checker_errors": internal_errors,
        "objectives": w.objective.summary(),
    }
    und = undecided(w)
    for s in workers:  # what the followed workers saw adds to what this process saw
        wc = s.get("coverage") or {}
        for key in ("evaluation_passes", "evaluation_forwards", "backward_calls"):
            cov[key] += int(wc.get(key, 0))
        cov["models"] += [m for m in wc.get("models", []) if m not in cov["models"]]
        cov["optimizers"] += [o for o in wc.get("optimizers", []) if o not in cov["optimizers"]]
    trained = [s for s in workers if s.get("steps")]
    if trained and w.steps == 0:
        # the workers trained, this process did not: a check is undecided only where no worker could judge it
        per_worker = [(s.get("coverage") or {}).get("undecided", {}) for s in trained]
        und = {i: why for i, why in per_worker[0].items() if all(i in u for u in per_worker[1:])}
    cov["undecided"] = und
    return cov


def _drop_consequences(found: list[Finding]) -> list[Finding]:
    """Report the cause, not its symptoms: a finding that counts (a warning or an error) drops those its detector
    `explains`, in the registry's order (a dropped finding explains nothing)."""
    ids = {f.id for f in found}
    counting = {f.id for f in found if f.counts}
    for cause in ORDER:
        if cause in ids and cause in counting:
            ids -= set(REGISTRY[cause].explains)
    return [f for f in found if f.id in ids]
