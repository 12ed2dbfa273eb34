"""no-gradient-flow: optimizer parameters that never receive a gradient, told apart by whether their layers ran.

Its own module because the decision has two halves with different harms: a step that finds no gradient at all
(cleared between backward() and step(), or a loss cut from the model), and some parameters without one, which is
a mistake for layers that run in the forward (the graph is cut before them) and a leftover for layers that never
run (they compute nothing).
"""
from __future__ import annotations

from torchwise.diagnose.catalog import Finding


def no_gradient_flow(w) -> list[Finding]:
    """no-gradient-flow: steps that found no gradient at all, or parameters that never get one."""
    out: list[Finding] = []
    ev = [e for e in w.optim_steps.no_grad_events if e["step"] >= 0]
    if len(ev) >= 2:
        all_missing = [e for e in ev if e["missing"] == e["total"] and e["backward_since_step"] > 0]
        partial = [e for e in ev if 0 < e["missing"] < e["total"]]
        if len(all_missing) >= 0.8 * len(ev):
            out.append(Finding("no-gradient-flow", where=w.optim_steps.step_where,
                               message=f"At {len(all_missing)} of {len(ev)} checked steps, optimizer.step() found no "
                                       "gradient on any parameter although backward() ran: the gradients were cleared "
                                       "between backward() and step(), or the loss is cut from the model.",
                               evidence={"steps_without_gradients": len(all_missing), "steps_checked": len(ev)}))
        elif len(partial) >= 0.8 * len(ev):
            out += _params_without_gradient(w, partial)
    return out


def _params_without_gradient(w, partial: list[dict]) -> list[Finding]:
    """Parameters without a gradient at every checked step: a warning for those of layers that ran in a forward
    (the graph is cut before them: they should learn and do not); an info hint when none of their layers ran
    (a layer built and never called: a leftover, which harms nothing but memory and DDP's unused-parameter check)."""
    owned = {pid for info in w.models.roots.values() for pid in info.param_names}
    ids = set.intersection(*(e["ids"] for e in partial)) & owned  # not: params left behind by a replaced layer
    used, unused = [], []
    reads = w.models.outputs
    for info in w.models.roots.values():
        # a layer that ran but whose output nothing read computes nothing the loss depends on: as if it never ran
        ran = {name for mid, name in info.names.items() if mid in w.models.called and not reads.unread(mid)}
        for pid, name in info.param_names.items():
            if pid in ids:
                # its layer ran, but no operation ever took the parameter itself: made for an option that is off
                computed = name.rpartition(".")[0] in ran and not reads.never_read(pid)
                (used if computed else unused).append(info.label + "." + name)
    if not used and not unused:
        return []
    names = used or unused
    listed = f"{', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"
    if used:
        return [Finding("no-gradient-flow", where=w.optim_steps.step_where, severity="warning",
                        message=f"{len(used)} of {partial[-1]['total']} parameter tensors of layers that ran in the "
                                f"forward never receive a gradient ({len(partial)} checked steps): {listed}. The graph "
                                "is cut before them (.detach(), .item(), .numpy(), .data, torch.tensor(...)).",
                        evidence={"parameters": names[:20], "count": len(used), "unused_layers_params": len(unused)})]
    return [Finding("no-gradient-flow", where=w.optim_steps.step_where, severity="info",
                    maybe_fine=_UNUSED_LAYERS,
                    message=f"{len(unused)} of {partial[-1]['total']} parameter tensors never receive a gradient "
                            f"({len(partial)} checked steps), and they compute nothing: their layers never ran in a forward, "
                            f"ran with nothing reading what they computed, or no operation took them: {listed}.",
                    evidence={"parameters": names[:20], "count": len(unused)})]


_UNUSED_LAYERS = ("Layers that are built but never called (a leftover, a backbone kept beside the copy that is used), "
                  "or called with their output thrown away (a head after the layer a forward hook reads features "
                  "from), and parameters made for an option that is off, change nothing the loss depends on; they cost memory, and DistributedDataParallel needs "
                  "find_unused_parameters=True for them. If a layer should be used, call it in forward.")
