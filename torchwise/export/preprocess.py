"""An exported model's inputs, prepared the way the model saw them at validation: no torch.

The pre-processing is read from the spec that torchwise.export.metadata writes into the exported
file (`torchwise.preprocess`). The image steps reproduce torchwise.data.transforms.val_transform one
by one (shorter side resize, center crop, scale to [0, 1], normalize); tests check them against
torchvision. Both export (its verification on real inputs) and predict use this module, so it
lives in the export layer, below predict, and must never import torch: deployment machines often
do not have it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from torchwise.data.imagefolder import IMAGE_EXTENSIONS  # torch-free: the extensions training reads
from torchwise.errors import TorchwiseError

IMAGE_SIGNATURES = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"RIFF", b"II*\x00", b"MM\x00*")


def collect_images(inputs: Sequence[str]) -> list[str]:
    # A folder is walked the way training walks one: hidden and tool folders skipped, no link loops.
    from torchwise.data.imagefolder import walk_images

    files: list[str] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files += [str(p) for p in walk_images(path)]
        elif path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS:
            files.append(str(path))
    return files


def _resized_size(width: int, height: int, shorter: int) -> tuple[int, int]:
    # torchvision's rule for Resize(int): the shorter side becomes `shorter`, the longer one scales
    # and is truncated.
    if width <= height:
        return shorter, int(shorter * height / width)
    return int(shorter * width / height), shorter


def preprocess_image(path: str, spec: Mapping[str, Any]):
    """One image -> float32 array C x H x W, exactly as the model saw images at validation."""
    import numpy as np
    from PIL import Image

    from torchwise.data.imagefolder import UnreadableImage, read_image

    height, width = spec["size"]
    try:
        # The decoding training used: EXIF orientation, the real bit depth (16-bit, float), alpha
        # composited, then the model's mode.
        image = read_image(path, spec["mode"])
    except UnreadableImage as exc:  # a decoder's error (its cause) or a pixel scale torchwise cannot trust
        cause = exc.__context__ if isinstance(exc.__context__, Exception) else exc
        raise TorchwiseError("An input image cannot be read.", values={"path": path, "error": _image_error(path, cause)},
                             fix="check that the file is a valid image (PNG, JPEG, ...)") from None
    shorter = spec.get("resize_shorter")
    if shorter:
        new_w, new_h = _resized_size(image.width, image.height, int(shorter))
        if (new_w, new_h) != image.size:
            image = image.resize((new_w, new_h), Image.BILINEAR)
        top = int(round((image.height - height) / 2.0))
        left = int(round((image.width - width) / 2.0))
        image = image.crop((left, top, left + width, top + height))
    elif image.size != (width, height):
        image = image.resize((width, height), Image.BILINEAR)
    array = np.asarray(image, dtype=np.float32) * np.float32(spec.get("scale", 1.0 / 255.0))
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    mean = np.asarray(spec["mean"], dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(spec["std"], dtype=np.float32).reshape(-1, 1, 1)
    return ((array - mean) / std).astype(np.float32)


def _image_error(path: str, exc: Exception) -> str:
    """One line a user can act on: what is wrong with this file."""
    size = Path(path).stat().st_size if Path(path).is_file() else None
    if size == 0:
        return "empty file (0 bytes)"
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {text[0] if text else ''}".strip(": ")[:200]
    if "cannot identify image file" in reason:
        with open(path, "rb") as handle:
            head = handle.read(8)
        # An image's signature followed by too little to decode: cut off, not another kind of file.
        if head.startswith(IMAGE_SIGNATURES):
            return f"truncated or damaged image ({size} bytes): {reason}"
        return f"not an image file ({size} bytes): {reason}"
    if "truncated" in reason or "broken data stream" in reason or isinstance(exc, SyntaxError):
        return f"truncated or damaged image ({size} bytes): {reason}"
    return reason


def preprocess_images(paths: Sequence[str], spec: Mapping[str, Any]):
    """All of `paths` as one array; the first unreadable image raises (see preprocess_readable)."""
    import numpy as np

    return np.stack([preprocess_image(p, spec) for p in paths]).astype(np.float32)


def preprocess_readable(paths: Sequence[str], spec: Mapping[str, Any]):
    """(array of the images that decode, their paths, [(position in paths, path, reason)] for those
    that do not): one bad file must not cost the others their predictions."""
    import numpy as np

    arrays, good, failed = [], [], []
    for position, path in enumerate(paths):
        try:
            arrays.append(preprocess_image(path, spec))
            good.append(path)
        except TorchwiseError as exc:
            failed.append((position, path, str(exc.values.get("error", exc.what))))
    x = np.stack(arrays).astype(np.float32) if arrays else None
    return x, good, failed


@dataclass
class CsvRows:
    """A CSV file's rows prepared for the model, with what identifies each row in the results."""
    x: Any                                  # standardized features float32 [N, F]
    labels: list[str]                       # "FILE:row N"
    rows: list[dict[str, Any]]              # per row: {"row": N (1 = first data row), "ids": {column: value}}
    read_as: str                            # how the file was read (separator, decimal mark, ID columns)
    missing_ids: list[str] = field(default_factory=list)  # ID columns of the training file absent here


def _own_decimal_marks(encoder: Any, table: Any) -> list[str]:
    """Numeric columns read with this file's own decimal mark where the file proves the other mark than
    the training file's (3.5 where training read 3,5): a cell proves it for its column, and when every
    proof in the file agrees, columns that cannot tell (1.234) follow them, as training decides. Read
    with the training mark they would be missing or a thousand times too large. Returns them."""
    from torchwise import numbers

    read = {column: numbers.decide_column([row[table.header.index(column)] for row in table.rows], hint=mark)
            for column, mark in encoder.decimals.items() if column in table.header}
    proofs = {col.proven for col in read.values() if col.numeric and col.proven}
    changed = []
    for column, col in read.items():
        mark = col.proven or (next(iter(proofs)) if len(proofs) == 1 else None)
        if col.numeric and mark and mark != encoder.decimals[column]:
            encoder.decimals[column] = mark
            changed.append(column)
    return changed


def read_csv_rows(path: str, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> CsvRows:
    """CSV rows -> features the model takes, read with the training file's decimal marks, and for each
    row its number and the values of the ID columns the training run recognised (kept beside every
    prediction, so results are matched by ID, not by position). The target column may be absent."""
    import numpy as np

    from torchwise.data.csv_read import describe_reading, read_table
    from torchwise.data.tabular_encoder import TabularEncoder

    tab = meta.get("tabular") or {}
    if "encoder" not in tab:
        raise TorchwiseError("The model's metadata has no tabular encoder, so CSV rows cannot be encoded.",
                             values={"metadata keys": sorted(meta)}, fix="export the model from a tabular run")
    table = read_table(path)
    encoder = TabularEncoder.from_dict(tab["encoder"])
    changed = _own_decimal_marks(encoder, table)
    x, imputed = encoder.encode(table.header, table.rows)
    mean = np.asarray(spec["mean"], dtype=np.float32)
    std = np.asarray(spec["std"], dtype=np.float32)
    x = ((x - mean) / std).astype(np.float32)
    ids = [c for c in encoder.ids if c in table.header]
    where = [table.header.index(c) for c in ids]
    rows = [{"row": i + 1, "ids": {c: row[j] for c, j in zip(ids, where)}} for i, row in enumerate(table.rows)]
    read_as = describe_reading(table.delimiter, encoder.decimals.values(), ids, encoding=table.encoding,
                               decided="as in training" if not changed else
                               f"this file's own in {len(changed)} column(s); the training file had the other mark")
    if imputed:  # an empty cell, or a number written with the other decimal mark than the training file's
        read_as += (f"; {imputed} feature cell(s) empty or not numbers with the training file's decimal mark: "
                    f"filled like missing values (the training mean, or no category)")
    return CsvRows(x, [f"{Path(path).name}:row {i + 1}" for i in range(len(table.rows))], rows, read_as,
                   [c for c in encoder.ids if c not in ids])


def preprocess_csv(path: str, meta: Mapping[str, Any], spec: Mapping[str, Any]):
    """CSV rows -> (standardized features float32 [N, F], labels "row N"). The target column may be absent."""
    read = read_csv_rows(path, meta, spec)
    return read.x, read.labels
