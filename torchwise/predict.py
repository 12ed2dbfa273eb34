"""Predictions from an exported .onnx file alone: onnxruntime + numpy + PIL, no torch.

Everything needed besides the graph (class names, input size, the evaluation pre-processing,
tabular encoders) is read from the file's metadata_props, written by `torchwise export`. The inputs
are pre-processed by torchwise.export.preprocess (the same steps as val_transform, no torch), which
export's verification uses too; its functions are importable from here as well.

This module must never import torch: deployment machines often do not have it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from torchwise.data.imagefolder import IMAGE_EXTENSIONS  # torch-free: the extensions training reads
from torchwise.errors import TorchwiseError, is_out_of_memory, out_of_memory
from torchwise.export.metadata import PREPROCESS_KEY, read_metadata
from torchwise.export.preprocess import (CsvRows, collect_images, preprocess_csv, preprocess_image,
                                         preprocess_images, preprocess_readable, read_csv_rows)
from torchwise.file_names import shown

# The pre-processing is part of predict's API too: a caller checks what the model will see with
# predict.preprocess_image(path, spec).
__all__ = ["OnnxModel", "collect_images", "failures", "format_table", "predict", "preprocess_csv",
           "preprocess_image", "preprocess_images", "preprocess_readable", "resolve_model_path", "softmax",
           "write_results"]


# --------------------------------------------------------------------------- model

def resolve_model_path(model: str | Path) -> Path:
    path = Path(model)
    if path.is_dir():
        for candidate in (path / "export" / "model.onnx", path / "model.onnx"):
            if candidate.is_file():
                return candidate
        raise TorchwiseError("No exported model.onnx in this directory.", values={"path": str(path)},
                             fix=f"run `torchwise export {path}` first (it writes {path / 'export' / 'model.onnx'})")
    if not path.is_file():
        raise TorchwiseError("The model file does not exist.", values={"path": str(path)},
                             fix="pass a .onnx file written by `torchwise export`, or its run directory")
    if path.suffix.lower() != ".onnx":
        raise TorchwiseError("predict reads .onnx files only.", values={"path": str(path)},
                             fix=f"export the run first: torchwise export RUNDIR --format onnx")
    return path


@dataclass
class OnnxModel:
    path: Path
    session: Any
    meta: dict[str, Any]

    @classmethod
    def load(cls, model: str | Path) -> "OnnxModel":
        from torchwise.export.onnx_file import open_session

        path = resolve_model_path(model)
        session = open_session(path)
        props = session.get_modelmeta().custom_metadata_map
        return cls(path, session, read_metadata(props))

    @property
    def spec(self) -> dict[str, Any] | None:
        return self.meta.get(PREPROCESS_KEY)

    @property
    def class_names(self) -> list[str] | None:
        names = self.meta.get("class_names")
        return [str(n) for n in names] if names else None

    @property
    def problem(self) -> str:
        return str(self.meta.get("problem", "classification"))

    def run(self, x, batch_size: int = 256):
        """Raw model outputs (logits) for pre-processed inputs, in chunks."""
        import numpy as np

        name = self.session.get_inputs()[0].name
        outs = [self.session.run(None, {name: np.ascontiguousarray(x[i:i + batch_size])})[0]
                for i in range(0, len(x), batch_size)]
        return np.concatenate(outs) if outs else np.zeros((0,), dtype=np.float32)

    def encode(self, inputs: Sequence[str], log: Callable[[str], None] | None = None):
        """(pre-processed array, labels, [(position, input, reason)] for inputs that cannot be read) for image
        files/folders or CSV files. The array is None when nothing could be read. A label is the input's
        path, or for a CSV row {"input": "FILE:row N", "row": N, "ids": {ID column: value}}; `log` gets
        one data line per CSV file (how it was read)."""
        import numpy as np

        spec = self.spec
        if spec is None:
            raise TorchwiseError("The .onnx file has no torchwise pre-processing metadata.",
                                 values={"path": str(self.path), "metadata keys": sorted(self.meta)},
                                 fix="export it with `torchwise export`, which stores class names and pre-processing")
        csvs = [p for p in inputs if Path(p).suffix.lower() == ".csv"]
        others = [p for p in inputs if p not in csvs]
        missing = [p for p in inputs if not Path(p).exists()]
        if missing:
            raise TorchwiseError("Some inputs do not exist.", values={"missing": missing[:10]},
                                 fix="pass image files, folders of images, or .csv files")
        if spec["kind"] == "tabular":
            if others:
                raise TorchwiseError("This model was trained on a table; pass .csv files.", values={"inputs": others[:5]},
                                     fix="pass a CSV file with the training columns (the target column may be absent)")
            parts = [read_csv_rows(p, self.meta, spec) for p in csvs]
            for path, part in zip(csvs, parts):
                if log is not None:
                    log(_data_line(path, part))
            labels = [{"input": label, **row} for part in parts for label, row in zip(part.labels, part.rows)]
            return np.concatenate([p.x for p in parts]), labels, []
        if csvs:
            raise TorchwiseError("This model was trained on images; a CSV cannot be its input.",
                                 values={"inputs": csvs[:5]}, fix="pass image files or folders")
        files = collect_images(others)
        if not files:
            raise TorchwiseError("No images found in the inputs.", values={"inputs": list(inputs)[:10]},
                                 fix=f"pass image files or folders holding them ({', '.join(sorted(IMAGE_EXTENSIONS))})")
        return preprocess_readable(files, spec)


def _data_line(path: str, part: CsvRows) -> str:
    line = f"data: {shown(path)}: {len(part.labels)} rows, read as: {part.read_as}"
    if part.missing_ids:
        line += (f"; the training file's ID column(s) {', '.join(map(repr, part.missing_ids))} are not in this "
                 f"file: rows are identified by their number only")
    return line


def softmax(logits):
    import numpy as np

    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def predict(model: str | Path | OnnxModel, inputs: Sequence[str], *, top_k: int = 5,
            log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """[{"input": label, "predictions": [{"class", "index", "probability"}, ...]}] (classification) or
    [{"input": label, "value": float | list}] (regression), in input order; an input that cannot be
    read gets {"input": path, "error": reason} in its place and the others are still predicted.
    A CSV row's result also has "row" (1: the first data row) and "ids" (the values of the columns the
    training run recognised as identifiers). `log` gets a data line per CSV file: how it was read."""
    onnx_model = model if isinstance(model, OnnxModel) else OnnxModel.load(model)
    try:
        x, labels, failed = onnx_model.encode(list(inputs), log=log)
        results = [] if x is None else [{**(label if isinstance(label, dict) else {"input": label}), **row}
                                        for label, row in zip(labels, _predictions(onnx_model, onnx_model.run(x),
                                                                                   top_k))]
    except Exception as exc:
        if isinstance(exc, TorchwiseError) or not is_out_of_memory(exc):
            raise
        raise out_of_memory(exc, f"predicting {len(inputs)} input(s)",
                            fix="predict fewer inputs per call (they are read and run together); close what else "
                                "uses the machine's memory (or raise the process' memory limit, ulimit -v)") from exc
    for position, path, reason in failed:  # ascending positions: each lands where its input was
        results.insert(position, {"input": path, "error": reason})
    return results


def _predictions(onnx_model: OnnxModel, out, top_k: int) -> list[dict[str, Any]]:
    import numpy as np

    results: list[dict[str, Any]] = []
    if onnx_model.problem == "regression":
        spec = onnx_model.spec or {}
        values = out * float(spec.get("target_std", 1.0)) + float(spec.get("target_mean", 0.0))
        for v in values:
            v = np.asarray(v).reshape(-1)
            results.append({"value": float(v[0]) if v.size == 1 else v.tolist()})
        return results
    probs = softmax(out.reshape(len(out), -1).astype(np.float64))
    names = onnx_model.class_names or [str(i) for i in range(probs.shape[1])]
    k = max(1, min(top_k, probs.shape[1]))
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    for p, idx in zip(probs, order):
        results.append({"predictions": [
            {"class": names[i] if i < len(names) else str(i), "index": int(i), "probability": float(p[i])}
            for i in idx]})
    return results


def failures(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in results if "error" in r]


def _id_columns(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ID columns of CSV rows' results, in the order they first appear."""
    return list(dict.fromkeys(c for r in results for c in (r.get("ids") or {})))


def format_table(results: Sequence[Mapping[str, Any]]) -> str:
    if not results:
        return "(no inputs)"
    width = min(60, max(len(str(r["input"])) for r in results))
    ids = _id_columns(results)  # a CSV row is shown with its ID, so it is matched by more than position
    id_widths = {c: min(30, max(len(c), *(len(str((r.get("ids") or {}).get(c, ""))) for r in results)))
                 for c in ids}

    def short(text: str, room: int = width) -> str:
        return text if len(text) <= room else "..." + text[-(room - 3):]

    def first(head: str, id_cells: Mapping[str, Any]) -> str:
        return "  ".join([f"{short(head):<{width}}"] + [f"{short(str(id_cells.get(c, '')), w):<{w}}"
                                                         for c, w in id_widths.items()])

    lines = []
    regression = any("value" in r for r in results)
    header = first("input", {c: c for c in ids})
    lines.append(f"{header}  prediction" if regression else f"{header}  {'top-1':<12} {'prob':>7}   others")
    for r in results:
        name = first(str(r["input"]), r.get("ids") or {})
        if "error" in r:
            lines.append(f"{name}  ERROR: {r['error']}")
        elif regression:
            value = r["value"]
            text = f"{value:.6g}" if isinstance(value, float) else ", ".join(f"{v:.6g}" for v in value)
            lines.append(f"{name}  {text}")
        else:
            top, rest = r["predictions"][0], r["predictions"][1:]
            others = ", ".join(f"{p['class']} {p['probability'] * 100:.1f}%" for p in rest)
            lines.append(f"{name}  {str(top['class']):<12} {top['probability'] * 100:6.1f}%   {others}")
    return "\n".join(lines)


def write_results(results: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """`path` as .json (the results as they are) or .csv: one row per input, an empty `error` column
    for a prediction and the reason for an input that could not be read. CSV rows' results also get
    a `row` column (1: the input file's first data row) and one column per ID column, so they can be
    joined back to the inputs by ID."""
    import csv
    import io

    path = Path(path)
    if path.suffix.lower() == ".json":
        text = json.dumps(list(results), indent=2)
    else:
        regression = any("value" in r for r in results)
        ids = _id_columns(results)
        rows = ["row"] if any("row" in r for r in results) else []
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["input", *rows, *ids, *(["value", "error"] if regression else
                                                 ["class", "probability", "top_k", "error"])])
        for r in results:
            where = [r["input"], *([r.get("row", "")] if rows else []), *((r.get("ids") or {}).get(c, "") for c in ids)]
            if regression:
                value = r.get("value")
                writer.writerow([*where, "" if value is None else json.dumps(value), r.get("error", "")])
                continue
            preds = r.get("predictions") or []
            top = preds[0] if preds else {}
            writer.writerow([*where, top.get("class", ""), f"{top['probability']:.6f}" if top else "",
                             "; ".join(f"{p['class']} {p['probability']:.4f}" for p in preds), r.get("error", "")])
        text = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(shown(text), encoding="utf-8")  # an input named in Latin-1 is written readably, not a crash
    return path
