"""Schedulers, clipping, the AMP scaler and DDP sampling: decisions on diagnose/probes.py's evidence."""
from __future__ import annotations

from torchwise.diagnose.catalog import Finding


def decide(w) -> list[Finding]:
    probes = w.calls
    if probes is None:  # driven by the Trainer, which steps, clips and samples these itself
        return []
    found: list[Finding] = []
    stopped = bool(w.health.stop_reason) or (bool(w.max_steps) and w.steps >= w.max_steps)
    for rec in probes.schedulers.values():
        f = _per_batch_scheduler(rec, stopped)
        if f is not None:
            found.append(f)
    for rec in probes.plateaus.values():
        # every call came with no evaluation since the one before: the metric cannot be a validation one
        if rec.calls >= 2 and rec.always_without_eval:
            found.append(Finding("plateau-on-train-loss",
                                 f"ReduceLROnPlateau.step(metric) was called {rec.calls} times with no validation "
                                 "forward pass before any of them, so its metric comes from training.",
                                 where=rec.where, evidence={"calls without evaluation": rec.calls}))
    if probes.clip_scaled is not None:
        c = probes.clip_scaled
        found.append(Finding("clip-scaled-gradients",
                             f"{c['call']} ran on gradients still multiplied by the GradScaler's scale "
                             f"({c['scale']:.0f}); scaler.unscale_(optimizer) was not called first.",
                             where=c["where"], evidence={"loss scale": c["scale"]}))
    if probes.clip_useless is not None:
        c = probes.clip_useless
        found.append(Finding("clip-has-no-effect", f"{c['call']} ran {c['reason']}: it changes no update "
                             f"(first seen after optimizer step {c['step']}).",
                             where=c["where"], evidence={"call": c["call"], "optimizer steps before": c["step"]}))
    if probes.ddp_unsharded is not None:
        d = probes.ddp_unsharded
        found.append(Finding("ddp-no-distributed-sampler",
                             f"Rank {d['rank']} of {d['world_size']} iterates all {d['samples per rank']} samples "
                             f"with a {d['sampler']}: every rank trains on the whole data set.",
                             where=d["where"], evidence={k: v for k, v in d.items() if k != "where"}))
    return found


def _per_batch_scheduler(rec, stopped: bool = False) -> Finding | None:
    """A scheduler stepped per batch whose schedule is sized in epochs. Judged by the schedule's length
    against the run's steps, not by the class: CosineAnnealingLR(T_max=epochs * len(loader)) stepped
    every batch ends with the run, as meant; StepLR(step_size=30) with 1000 batches an epoch is spent
    within the first epoch."""
    busiest = max(rec.per_pass, key=rec.per_pass.get, default=None)
    if busiest is None:
        return None
    batches = rec.pass_len.get(busiest, 0)
    if rec.per_pass[busiest] < 3 and not (rec.per_pass[busiest] >= 2 and rec.per_pass[busiest] >= batches):
        return None  # once per epoch (or twice in a long one) is what these schedulers expect; on every batch of
        #              a 2-batch epoch it is per batch all the same
    horizon = "-" if rec.horizon is None else f"{rec.horizon:g}"
    evidence = {"scheduler": rec.kind, "steps in one epoch": rec.per_pass[busiest], "batches per epoch": batches,
                "schedule length": horizon, "scheduler steps": rec.calls, "lr first": rec.lr_first,
                "lr last": rec.lr_last}
    if rec.horizon is not None and rec.horizon < batches:
        return Finding("scheduler-stepped-per-batch",
                       f"{rec.kind}.step() ran {rec.per_pass[busiest]} times inside one pass over a {batches}-batch "
                       f"training loader; its schedule spans {horizon} steps, less than one epoch: it is sized in "
                       f"epochs. LR went from {rec.lr_first:.3g} to {rec.lr_last:.3g}.",
                       where=rec.where, evidence=evidence)
    # sized in steps (or of no fixed length): wrong only if the LR is spent long before the run ends;
    # the run's length is the calls seen (all of them when the script ran to its end)
    if rec.collapse_at is not None and rec.collapse_at < 0.5 * rec.calls:
        return Finding("scheduler-stepped-per-batch",
                       f"{rec.kind}.step() ran {rec.per_pass[busiest]} times inside one pass over a {batches}-batch "
                       f"training loader, and the LR fell to 1/100 of its start ({rec.lr_first:.3g}) after "
                       f"{rec.collapse_at} of the {rec.calls} scheduler steps{' seen' if stopped else ' of the run'}: "
                       f"the schedule ({horizon} steps) ends long before training does. LR last: {rec.lr_last:.3g}.",
                       where=rec.where, evidence=evidence | {"lr at 1/100 at step": rec.collapse_at})
    return None


def undecided(w) -> dict[str, str]:
    """Detectors of this module that could not judge this run, and why (for the coverage report)."""
    probes = w.calls
    if probes is None:
        return {}
    stopped = bool(w.health.stop_reason) or (bool(w.max_steps) and w.steps >= w.max_steps)
    out: dict[str, str] = {}
    for rec in probes.schedulers.values():
        busiest = max(rec.per_pass, key=rec.per_pass.get, default=None)
        if busiest is None or rec.per_pass[busiest] < 3 or _per_batch_scheduler(rec, stopped) is not None:
            continue
        batches = rec.pass_len.get(busiest, 0)
        if stopped and rec.collapse_at is None and (rec.horizon is None or rec.horizon >= batches) \
                and (rec.horizon is None or rec.horizon > rec.calls):
            h = "no fixed length" if rec.horizon is None else f"{rec.horizon:g} steps"
            out["scheduler-stepped-per-batch"] = (
                f"{rec.kind} is stepped every batch and its schedule ({h}) is longer than the {rec.calls} steps "
                "seen before the run was stopped: whether it ends with the training could not be seen")
    return out
