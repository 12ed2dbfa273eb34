"""loss-not-decreasing: the training loss judged against its own noise, per optimizer where several take turns and
per fit where the run holds separate fits (checks/fits.py)."""
from __future__ import annotations

import math

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import fits, step_record
from torchwise.diagnose.checks.step_record import SHORT_RUN_VALUES
from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES


def trend(vals: list[float]) -> tuple[float, float, int]:
    """Least-squares slope of the curve after its first 10% (the start moves fastest), and its
    standard error from the curve's own noise around the line."""
    ys = vals[len(vals) // 10:]
    m = len(ys)
    xm = (m - 1) / 2
    ym = sum(ys) / m
    sxx = sum((i - xm) ** 2 for i in range(m)) or 1.0
    b = sum((i - xm) * (y - ym) for i, y in enumerate(ys)) / sxx
    res = sum((y - ym - b * (i - xm)) ** 2 for i, y in enumerate(ys))
    se = math.sqrt(res / max(1, m - 2) / sxx)
    return b, se, m


def _curve_summary(vals: list[float], chance: float | None) -> dict | None:
    if len(vals) < 30:
        return None
    k = max(3, len(vals) // 10)
    first = sum(vals[:k]) / k
    tail = vals[-max(3, len(vals) // 4):]
    last = sum(tail) / len(tail)
    return {"first": first, "last": last, "n": len(vals),
            "learned": bool(chance and last < 0.5 * chance)}


def _loss_series(w, ls: dict, order: list[int] | None) -> list[tuple[str | None, list[float]]]:
    """The loss curves to judge: one per optimizer where several step (each has its own loss and objective),
    else the whole run's; only those of a fixed objective (a GAN's or a policy gradient's need not fall)."""
    all_curves = step_record.loss_curves(w, ls)
    curves = {oid: c for oid, c in all_curves.items() if len(c) >= 30}
    names = {id(o): type(o).__name__ for o in w.optim_steps.optimizers}
    kinds = w.objective.kinds()
    loose = {oid: k for oid, k in kinds.items() if k not in FIXED_OBJECTIVES}
    if order is not None:  # separate fits (checks/fits.py); each fit runs the same code: one fit's objective is every fit's
        if not kinds or loose:
            return []
        return [(f"fit {i + 1} of {len(order)} ({names.get(oid, 'optimizer')})", all_curves.get(oid, []))
                for i, oid in enumerate(order)]
    if len(curves) >= 2:
        return [(f"{names.get(oid, 'optimizer')} #{i + 1}", c) for i, (oid, c) in enumerate(curves.items())
                if oid not in loose and oid in kinds]
    if kinds and not loose:
        return [(None, [v for v in ls["vals"] if math.isfinite(v)])]
    return []


def judge_loss(w, ls: dict) -> tuple[list[Finding], str | None]:
    """loss-not-decreasing, or why it cannot be judged. A verdict needs a clear absence of progress
    relative to the loss's noise, or enough of the run seen (to its end, or two whole epochs): a few
    hundred steps of a long first epoch hold a slow start as well as a failure."""
    flags = getattr(w, "lr_flags", {})
    if ls.get("first") is None or ls["n"] < 30 or ls["first_bad"] is not None or any(flags.values()):
        return [], None
    adv = step_record.adversarial_pair(w)
    if adv is not None:
        return [], (f"two optimizers ({adv['optimizers'][0]}, {adv['optimizers'][1]}) over separate models step "
                    "in turn" + (", one model's output feeding the other" if adv["fed"] else "") +
                    ": an adversarial pair (a GAN), whose losses pull against each other and need not decrease")
    C = w.loss_watch.cls.get("C")
    chance = math.log(C) if C and C >= 2 else (math.log(2) if w.loss_watch.bin["pos"] + w.loss_watch.bin["neg"] else None)
    order = fits.separate_fits(w)
    series = _loss_series(w, ls, order)
    if not series:
        return [], w.objective.not_judged()
    stopped = bool(w.health.stop_reason) or (bool(w.max_steps) and w.steps >= w.max_steps)
    epochs = sum(1 for p in w.loaders.passes if p.closed and p.steps > 0)
    seen_enough = not stopped or epochs >= 2
    if order is not None:
        return _judge_fits(w, series, chance, seen_enough)
    found, reasons = [], []
    for label, vals in series:
        cs = _curve_summary(vals, chance)
        if cs is None:
            continue
        if label is None:
            cs["learned"] = ls["learned"]
        if not _is_flat(cs):
            continue
        b, se, best_drop, clear = _noise_bound(vals, cs)
        if not (clear or seen_enough):
            reasons.append(
                f"{'the loss of ' + label if label else 'the loss'} went from {cs['first']:.4g} to {cs['last']:.4g} "
                f"over {cs['n']} values, but the run was stopped after {w.steps} optimizer steps "
                f"({epochs} whole epoch(s) seen) and "
                + (f"it is still falling, beyond its noise (slope {b:.2g} +- {2 * se:.2g} per value): a slow start"
                   if b + 2 * se < 0 else
                   f"at its noise (slope {b:.2g} +- {2 * se:.2g} per value) a slow start cannot be told from no "
                   "progress"))
            continue
        found.append(_flat_loss_finding(w, cs, label, best_drop, clear, cut_short=not seen_enough,
                                        short_run=cs["n"] < SHORT_RUN_VALUES))
        break
    return found, ("; ".join(reasons) if reasons and not found else None)


def _noise_bound(vals: list[float], cs: dict) -> tuple[float, float, float, bool]:
    """The curve's trend (slope, standard error), the most decrease its noise allows over the window (2 s.e.), and
    whether that is clearly no progress (under 3% of where it started)."""
    b, se, m = trend(vals)
    best_drop = max(0.0, -(b - 2 * se)) * m
    return b, se, best_drop, best_drop < 0.03 * cs["first"]


def _is_flat(cs: dict) -> bool:
    return cs["last"] > 0.97 * cs["first"] and cs["first"] > 1e-3 and not cs["learned"]


def _judge_fits(w, series: list, chance: float | None, seen_enough: bool) -> tuple[list[Finding], str | None]:
    """Separate fits (checks/fits.py): each fit's curve judged on its own; a finding only when every fit long enough
    to judge stayed flat, for a search's poor settings are expected to train badly."""
    judged, flat = 0, []
    for label, vals in series:
        cs = _curve_summary(vals, chance)
        if cs is None:
            continue
        judged += 1
        if not _is_flat(cs):
            return [], None
        _, _, best_drop, clear = _noise_bound(vals, cs)
        if not (clear or seen_enough):
            return [], None  # a slow start in a run cut short: no verdict on this fit, so none on all
        flat.append((label, cs, best_drop, clear))
    if not judged:
        longest = max((len(vals) for _, vals in series), default=0)
        return [], (f"{len(series)} separate fits (a new model and optimizer each: a search, cross-validation "
                    f"folds) of at most {longest} loss values each: too few in any one fit to judge its curve")
    label, cs, best_drop, clear = flat[-1]
    values = sum(c["n"] for _, c, _, _ in flat)  # every fit flat: the evidence is all of their losses
    finding = _flat_loss_finding(w, cs, label, best_drop, clear, cut_short=not seen_enough,
                                 short_run=values < SHORT_RUN_VALUES)
    finding.message += (f" Every one of the {judged} separate fits long enough to judge (a new model and optimizer "
                        f"each, {values} loss values in all) stayed as flat.")
    finding.evidence["fits_flat"] = judged
    return [finding], None


def _flat_loss_finding(w, cs: dict, label: str | None, best_drop: float, clear: bool, cut_short: bool,
                       short_run: bool = False) -> Finding:
    """A flat loss. Seen over the whole run (or two epochs) it is the harm itself: a warning. Cut short by check
    within the first epoch, or a whole run of fewer than SHORT_RUN_VALUES losses, it is only a hint: a slow start
    (per-sample updates, a small learning rate, a warm-up) looks the same over so few steps."""
    if short_run and not cut_short:
        hint = (f"the whole run made {cs['n']} loss values: a slow start (plain SGD at a small learning rate, a "
                "warm-up) is flat over that few steps too; a longer run tells them apart.")
        return Finding("loss-not-decreasing", where=w.loss_watch.backward_where, severity="info", maybe_fine=hint,
                       message=f"Over the run's {cs['n']} loss values{f' of {label}' if label else ''} the training "
                               f"loss went from {cs['first']:.4g} (first 10%) to {cs['last']:.4g} (last 25%).",
                       evidence={"loss_first": cs["first"], "loss_last": cs["last"], "values": cs["n"],
                                 "most_decrease_within_noise": best_drop, "optimizer": label})
    of = f" of {label}" if label else ""
    return Finding("loss-not-decreasing", where=w.loss_watch.backward_where,
                   message=f"Over {cs['n']} loss values{of} the training loss went from {cs['first']:.4g} "
                           f"(first 10%) to {cs['last']:.4g} (last 25%)"
                           + (f"; at its noise level, it fell by at most {best_drop:.2g} over them." if clear else ".")
                           + (f" check stopped the script after {w.steps} optimizer steps, within its first epoch."
                              if cut_short else ""),
                   evidence={"loss_first": cs["first"], "loss_last": cs["last"], "values": cs["n"],
                             "most_decrease_within_noise": best_drop, "optimizer": label},
                   severity="info" if cut_short else "",
                   maybe_fine=(f"check stopped the script after {w.steps} optimizer steps: a slow start (per-sample "
                               "updates, a small learning rate, a warm-up) is flat over them too; `--max-steps 0` "
                               "judges the whole run.") if cut_short else "")
