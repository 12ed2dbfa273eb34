"""What a finished (or resumed-and-finished) search leaves: trials.csv and a printed table,
best.yaml ready for `torchwise train --config`, PNG plots and summary.json, and the TuneResult
`torchwise.tune` returns (here, below search.py, which only calls write_results)."""
from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torchwise.errors import TorchwiseError


@dataclass
class TuneResult:
    study_dir: Path
    storage: str
    study_name: str
    metric: str
    direction: str
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    best_config_path: Path | None
    counts: dict[str, int]               # trials by state: complete, pruned, fail, interrupted, running, waiting
    table_path: Path
    plots: list[Path] = field(default_factory=list)
    applied_path: Path | None = None


def trial_rows(study, settings: dict[str, Any]) -> list[dict[str, Any]]:
    from torchwise.tune.study import is_interrupted

    keys = list(settings["space"])
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        state = t.state.name.lower()
        if state == "fail":
            state = "interrupted" if is_interrupted(t) else "failed"
        value = t.value if t.state.name in ("COMPLETE", "PRUNED") else None
        if value is None and t.state.name == "PRUNED" and t.intermediate_values:
            value = t.intermediate_values[max(t.intermediate_values)]
        row: dict[str, Any] = {"trial": t.number, "state": state, "value": value}
        row.update({key: t.params.get(key) for key in keys})
        row.update(evaluations=len(t.intermediate_values) if t.intermediate_values else t.user_attrs.get("evaluations"),
                   duration_s=t.user_attrs.get("duration_s"), reason=t.user_attrs.get("fail_reason", ""),
                   run_dir=t.user_attrs.get("run_dir", ""))
        rows.append(row)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(rows: list[dict[str, Any]], best: int | None, metric: str) -> str:
    if not rows:
        return "(no trials)"
    columns = [c for c in rows[0] if c not in ("run_dir",)]
    header = {c: (metric if c == "value" else c) for c in columns}
    cells = [[("*" if r["trial"] == best and c == "trial" else "") + _cell(r[c]) for c in columns] for r in rows]
    width = {c: max(len(header[c]), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)}
    width["reason"] = min(width.get("reason", 0), 70)
    lines = ["  ".join(header[c].ljust(width[c]) for c in columns).rstrip()]
    for row in cells:
        lines.append("  ".join(text[:width[c]].ljust(width[c]) for c, text in zip(columns, row)).rstrip())
    return "\n".join(lines)


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return path


def best_config(settings: dict[str, Any], params: dict[str, Any], study_dir: Path):
    from torchwise import config as cfg

    config = cfg.apply_overrides(cfg.from_dict(settings["base_config"]), params)
    # A fresh run directory: `torchwise train --config best.yaml` trains the best trial's config again,
    # with the report the trials skipped.
    return cfg.apply_overrides(config, {"output.dir": str(study_dir / "best-run"), "train.resume": False})


def write_plots(study, study_dir: Path, log: Callable[[str], None]) -> list[Path]:
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    written = []
    plots = {"optimization_history.png": ovm.plot_optimization_history,
             "param_importances.png": ovm.plot_param_importances,
             "intermediate_values.png": ovm.plot_intermediate_values}
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    for name, plot in plots.items():
        if name == "param_importances.png" and len(complete) < 2:
            log("tune: parameter importances need at least 2 complete trials; plot skipped")
            continue
        if name == "optimization_history.png" and not complete:
            continue
        if name == "intermediate_values.png" and not any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = plot(study)
            figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            if name == "intermediate_values.png":
                ax.set_xlabel("evaluation (validation run) of the trial")
                ax.set_ylabel(study.user_attrs["settings"]["metric"])
            figure.set_size_inches(8, 5)
            figure.savefig(study_dir / name, dpi=110, bbox_inches="tight")
            plt.close(figure)
            written.append(study_dir / name)
        except (ValueError, RuntimeError, ZeroDivisionError, optuna.exceptions.OptunaError) as exc:
            # e.g. importances when every complete trial has the same value
            log(f"tune: {name} skipped: {type(exc).__name__}: {exc}")
            plt.close("all")
    return written


def write_results(study, study_dir: Path, url: str, name: str, settings: dict[str, Any], *,
                  apply: str | Path | None, log: Callable[[str], None]):
    import yaml

    metric, direction = settings["metric"], settings["direction"]
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    best = study.best_trial if complete else None
    rows = trial_rows(study, settings)
    table_path = write_csv(rows, study_dir / "trials.csv")
    log("")
    log(format_table(rows, best.number if best else None, metric))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    log("tune: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + f"; table: {table_path}")
    plots = write_plots(study, study_dir, log)
    best_path = applied = None
    if best is not None:
        config = best_config(settings, best.params, study_dir)
        best_path = study_dir / "best.yaml"
        text = (f"# torchwise tune: best of {len(rows)} trials (study {name!r}): trial {best.number}, "
                f"{metric} {best.value:.6g}\n# train it: torchwise train --config {best_path}\n")
        best_path.write_text(text + yaml.safe_dump(config.to_dict(), sort_keys=False))
        if apply:
            applied = Path(apply)
            applied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(best_path, applied)
    summary = {"study": name, "storage": url, "metric": metric, "direction": direction, "counts": counts,
               "best": None if best is None else {"trial": best.number, "value": best.value, "params": best.params,
                                                  "run_dir": best.user_attrs.get("run_dir"),
                                                  "config": str(best_path)},
               "plots": [str(p) for p in plots], "table": str(table_path)}
    (study_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if best is None:
        reasons = sorted({r["reason"] for r in rows if r["reason"]})
        fix = ("read the reasons (error.txt in each failed trial's run directory has the traceback), fix the run "
               "config or narrow the space, then run the same command again")
        if counts.get("pruned"):
            fix += "; when trials are pruned before any completes, use more trials or --pruner none"
        raise TorchwiseError("No trial completed, so there is no best config.",
                             values={"trials": counts, "reasons": reasons or "-", "table": str(table_path)}, fix=fix)
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.params.items())
    log(f"tune: best trial {best.number}: {metric} {best.value:.4g} with {shown}")
    log(f"tune: best config: {best_path}")
    if applied:
        log(f"tune: copied to {applied}; train it: torchwise train --config {applied}")
    else:
        log(f"tune: train it: torchwise train --config {best_path}")
    if plots:
        log("tune: plots: " + ", ".join(p.name for p in plots))
    return TuneResult(study_dir=study_dir, storage=url, study_name=name, metric=metric, direction=direction,
                      best_value=None if best is None or math.isnan(best.value) else best.value,
                      best_params=dict(best.params), best_trial=best.number, best_config_path=best_path,
                      counts=counts, table_path=table_path, plots=plots, applied_path=applied)
