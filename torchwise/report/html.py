"""report.html: one self-contained page per run.

Everything is inside the file (CSS inline, plots and example images as base64 PNG data URIs), so
it can be mailed, attached to a ticket or opened from an archive without the run directory.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
from pathlib import Path
from typing import Any, Sequence

from torchwise.file_names import shown
from torchwise.report import imbalance, many_classes, plots

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f5f5f5} td.l,th.l{text-align:left} .muted{color:#777} .bad{color:#b00}
.cards{display:flex;flex-wrap:wrap;gap:1em} .card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em}
.card b{display:block;font-size:1.4em} .plots img{max-width:100%;margin:.3em}
.worst{display:flex;flex-wrap:wrap;gap:.8em} .worst figure{margin:0;border:1px solid #eee;padding:.3em;text-align:center;font-size:.8em}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.85em}
.finding{border-left:4px solid #999;padding:.1em 1em;margin:.8em 0} .finding.error{border-color:#b00}
.finding.warning{border-color:#d80} .finding.info{border-color:#48c} .finding h3{font-size:1em}
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _img(png: bytes | None, alt: str) -> str:
    return "" if png is None else f'<img src="{data_uri(png)}" alt="{_esc(alt)}">'


def _esc(value: Any) -> str:
    return html.escape(shown(value))  # a file name that is not UTF-8 is shown readably, never a crash


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return _esc(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{_esc(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_fmt(c)}</td>' for i, c in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cards(items: Sequence[tuple[str, Any]]) -> str:
    return '<div class="cards">' + "".join(f'<div class="card"><b>{_fmt(v)}</b>{_esc(k)}</div>'
                                            for k, v in items if v is not None) + "</div>"


def _curves(rows: list[dict[str, Any]], classes: int) -> str:
    from torchwise.train.evaluate.streaming_metrics import shows_top5

    if not rows:
        return '<p class="muted">No metrics.csv rows.</p>'
    # top-5 only where it says something (more than 10 classes: streaming_metrics.TOP5_MIN_CLASSES), also for a
    # metrics.csv written before that rule
    accuracies = ["val_acc", "val_top5"] if shows_top5(classes) else ["val_acc"]
    pngs = [
        plots.curve_png(rows, ["train_loss", "val_loss"], title="loss", ylabel="loss", log=True),
        plots.curve_png(rows, accuracies, title="validation accuracy", ylabel="accuracy"),
        plots.curve_png(rows, ["lr"], title="learning rate", ylabel="lr"),
    ]
    return '<div class="plots">' + "".join(_img(p, "training curve") for p in pngs if p) + "</div>"


def _evaluation(evaluation: dict[str, Any], class_names: Sequence[str]) -> str:
    if evaluation.get("problem") == "regression":
        parts = [_cards([("MAE", evaluation["mae"]), ("RMSE", evaluation["rmse"]), ("R²", evaluation["r2"])])]
        if evaluation.get("predicted"):
            parts.append('<div class="plots">' + _img(plots.regression_png(evaluation["predicted"],
                                                                            evaluation["actual"]), "predicted vs actual")
                         + "</div>")
        return "".join(parts)
    per_class = evaluation["per_class"]
    if many_classes.is_many(len(per_class)) or "confusion" not in evaluation:
        return _many_classes(evaluation)
    rows = [[r["class"], r["precision"], r["recall"], r["f1"], r["support"]] for r in per_class]
    return ("<h3>Confusion matrix</h3>" + '<div class="plots">'
            + _img(plots.confusion_png(evaluation["confusion"], class_names), "confusion matrix") + "</div>"
            + "<h3>Per-class precision and recall</h3>" + '<div class="plots">'
            + _img(plots.per_class_png(per_class), "per-class precision and recall") + "</div>"
            + _table(["class", "precision", "recall", "f1", "support"], rows))


def _many_classes(evaluation: dict[str, Any]) -> str:
    """The summarised evaluation of a run with many classes (report/many_classes.py says what and why)."""
    per_class = evaluation["per_class"]
    parts = []
    top = evaluation.get("confusion_top")
    if top:
        parts += [f"<h3>Confusion matrix: the {len(top['classes'])} most-confused classes of "
                  f"{top['classes_total']:,}</h3>", f'<p class="muted">{_esc(many_classes.confusion_note(top))}</p>',
                  '<div class="plots">' + _img(plots.confusion_png(
                      top["matrix"], top["classes"], [*top["classes"], "(other classes)"],
                      title=f"confusion matrix, {len(top['classes'])} most-confused classes (validation)"),
                      "confusion matrix of the most-confused classes") + "</div>",
                  "<h3>Most often confused pairs</h3>",
                  _table(["true", "predicted", "examples"], [[p["true"], p["predicted"], p["count"]]
                                                            for p in top["pairs"]], left=2)]
    worst = many_classes.worst_classes(per_class)
    rows = [[r["class"], r["precision"], r["recall"], r["f1"], r["support"]] for r in worst]
    parts += [f"<h3>Per-class precision and recall: the {len(worst)} worst classes of {len(per_class):,}</h3>",
              f'<p class="muted">{_esc(many_classes.per_class_note(per_class, len(worst)))}</p>',
              '<div class="plots">' + _img(plots.score_spread_png(per_class), "per-class scores of all classes")
              + _img(plots.per_class_png(worst, title=f"the {len(worst)} classes with the lowest F1 (validation)"),
                     "per-class precision and recall of the worst classes") + "</div>",
              _table(["class", "precision", "recall", "f1", "support"], rows)]
    return "".join(parts)


def _rare_classes(evaluation: dict[str, Any]) -> str:
    """The warning about classes the model never or almost never predicts (report/imbalance.py), at the top."""
    lines = imbalance.warning_lines(evaluation)
    if not lines:
        return ""
    rare = evaluation["rarely_predicted"]
    header, rows = imbalance.table_rows(evaluation)
    more = rare["total"] - len(rows)
    return (f'<div class="finding warning"><h3>[warning] {_esc(lines[0].removeprefix("warning: ").rstrip(":"))}</h3>'
            + _table(header, rows)
            + (f'<p class="muted">... and {more:,} more classes (eval.json lists {len(rows)})</p>' if more else "")
            + f"<p>fix: {_esc(rare['fix'])}</p></div>")


def _worst(worst: Sequence[dict[str, Any]]) -> str:
    if not worst:
        return '<p class="muted">No misclassified validation examples.</p>'
    figures = []
    for item in worst:
        picture = _img(item["png"], item["id"]) if item.get("png") else ""
        figures.append(f'<figure>{picture}<figcaption>true <b>{_esc(item["true"])}</b><br>'
                       f'predicted <span class="bad">{_esc(item["predicted"])}</span> ({item["confidence"]:.0%})'
                       f'<br><span class="muted">{_esc(Path(str(item["id"])).name)}</span></figcaption></figure>')
    return '<div class="worst">' + "".join(figures) + "</div>"


def _data(summary: dict[str, Any]) -> str:
    parts = []
    facts = [(k, v) for k, v in summary.items()
             if k not in ("train_counts", "val_counts", "skipped", "classes", "warnings") and not isinstance(v, (list, dict))]
    parts.append(_table(["", ""], facts))
    train, val = summary.get("train_counts") or {}, summary.get("val_counts") or {}
    if train or val:
        names = list(train or val)
        rows, note = [[n, train.get(n, 0), val.get(n, 0)] for n in names], ""
        if many_classes.is_many(len(names)):  # the smallest and largest classes, and what was left out
            rows, note = many_classes.class_count_rows(train, val)
            note = f'<p class="muted">{_esc(note)}</p>'
        parts.append("<h3>Class counts</h3>" + note + _table(
            ["class", "train", "val"], rows + [["total", sum(train.values()), sum(val.values())]]))
    warnings = summary.get("warnings") or []
    if warnings:  # what the data scan could read but a person should know (rare classes, guessed decimal marks)
        parts.append(f"<h3>Data warnings: {len(warnings)}</h3><ul>"
                     + "".join(f"<li>{_esc(w)}</li>" for w in warnings) + "</ul>")
    for key in ("ignored_columns", "column_types"):
        if summary.get(key):
            parts.append(f"<h3>{_esc(key.replace('_', ' '))}</h3>"
                         + _table(["column", "why"], list(summary[key].items())))
    skipped = summary.get("skipped") or []
    parts.append(f"<h3>Skipped files: {len(skipped)}</h3>")
    if skipped:
        parts.append(_table(["file", "reason"], [[s["path"], s["reason"]] for s in skipped]))
    return "".join(parts)


def _checks(run_dir: Path) -> str:
    """The checker's findings on this run (RUNDIR/checks.json, written by the Trainer), one card each."""
    import json

    path = run_dir / "checks.json"
    if not path.is_file():
        return '<p class="muted">No checks.json in the run directory: the checks were off for this run.</p>'
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f'<p class="muted">checks.json could not be read ({_esc(exc)}).</p>'
    found = report.get("findings") or []
    steps = report.get("steps")
    if not found:
        return f"<p>No silent mistakes found ({_esc(steps)} optimizer steps watched).</p>"
    parts = [f"<p>{len(found)} finding(s) in {_esc(steps)} optimizer steps watched.</p>"]
    for f in found:
        where = f" <span class=\"muted\">at {_esc(f['where'])}</span>" if f.get("where") else ""
        fix = f"<pre>{_esc(f['fix'])}</pre>" if f.get("fix") else ""
        parts.append(f"<div class=\"finding {_esc(f.get('severity', ''))}\"><h3>[{_esc(f.get('severity'))}] "
                     f"{_esc(f.get('id'))}: {_esc(f.get('title'))}{where}</h3><p>{_esc(f.get('message'))}</p>"
                     + (f"<p class=\"muted\">why it matters: {_esc(f['why'])}</p>" if f.get("why") else "")
                     + fix + "</div>")
    return "".join(parts)


def write_report(run_dir: str | Path, *, title: str, summary: dict[str, Any], evaluation: dict[str, Any],
                 class_names: Sequence[str], worst: Sequence[dict[str, Any]] = (),
                 timing: dict[str, Any] | None = None, config: dict[str, Any] | None = None,
                 path: str | Path | None = None) -> Path:
    """Write run_dir/report.html (or `path`) and return its path."""
    run_dir = Path(run_dir)
    rows = plots.read_metrics_csv(run_dir / "metrics.csv")
    timing = timing or {}
    headline: list[tuple[str, Any]] = []
    if evaluation.get("problem") == "regression":
        headline.append(("val RMSE", evaluation.get("rmse")))
    elif "accuracy" in evaluation:  # with imbalanced classes: macro F1 and balanced accuracy beside it
        headline += [(f"val {name}", value) for name, value in imbalance.headline(evaluation)]
    headline += [("run time (s)", timing.get("run_time_s")), ("train time (s)", timing.get("train_time_s")),
                 ("optimizer steps", timing.get("steps")), ("epochs", timing.get("epochs")),
                 ("samples / s", timing.get("samples_per_s"))]
    sections = [
        f"<h1>{_esc(title)}</h1>",
        f'<p class="muted">{_esc(run_dir.resolve())} · written {_dt.datetime.now().isoformat(timespec="seconds")}</p>',
        _cards(headline),
        _rare_classes(evaluation) if evaluation.get("problem") == "classification" else "",
        "<h2>Training curves</h2>", _curves(rows, len(class_names)),
        "<h2>Validation results</h2>", _evaluation(evaluation, class_names),
    ]
    if evaluation.get("problem") != "regression":
        sections += ["<h2>Worst-classified validation examples</h2>", _worst(worst)]
    sections += ["<h2>Checks: silent training mistakes</h2>", _checks(run_dir)]
    sections += ["<h2>Data</h2>", _data(summary)]
    if timing:
        sections += ["<h2>Run time and throughput</h2>", _table(["", ""], list(timing.items()))]
    if config:
        import yaml

        sections += ["<h2>Configuration</h2>", f"<pre>{_esc(yaml.safe_dump(config, sort_keys=False))}</pre>"]
    page = ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")
    out = Path(path) if path else run_dir / "report.html"
    from torchwise.files import write_text

    write_text(out, page, root=None if path else run_dir)  # atomic, never through a link out of the run folder
    return out
