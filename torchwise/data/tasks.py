"""From a resolved config to ready-to-train data: the image-folder task or the CSV task.

`prepare_task` is what `torchwise train` runs; `eval_task` rebuilds the validation data of a
finished run (from split.json and meta.json, never by re-deciding anything) or prepares new
labelled data for it. Both return a `Task`, the one shape the CLI, the Trainer and the report use.
"""
from __future__ import annotations

import dataclasses

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torchwise.config import RunConfig
from torchwise.errors import ConfigError, TorchwiseError
from torchwise.files import write_text
from torchwise.data.model_input import image_side, resolve_model_name  # noqa: F401 - also imported from here
from torchwise.models.names import model_family, timm_input

SPLIT_FILE = "split.json"


@dataclass
class Task:
    kind: str                          # "image" | "tabular"
    problem: str                       # "classification" | "regression"
    train: Any                         # torch Dataset
    val: Any
    class_names: list[str]
    input_size: list[int]              # [C, H, W] or [n_features]
    mean: list[float]
    std: list[float]
    model_kwargs: dict[str, Any]       # for build_model, without weights
    summary: dict[str, Any]            # for the report and the console
    meta_extra: dict[str, Any] = field(default_factory=dict)
    # The raw validation image i (PIL) for the report's worst examples; None for tables.
    val_image: Callable[[int], Any] | None = None
    val_ids: list[str] = field(default_factory=list)   # file paths or "row N"
    # data.augment_on=device: the Trainer's batch_augment / batch_eval (torchwise.data.device_augment)
    batch_augment: Any = None
    batch_eval: Any = None
    # train.class_weights: {"scheme", "computed_from", "values" (class order), "train_counts"}; None: unweighted
    class_weights: dict[str, Any] | None = None
    label_smoothing: float = 0.0       # train.label_smoothing, for the weighted loss built here

    def meta(self) -> dict[str, Any]:
        """final/meta.json content (docs/CONTRACTS.md)."""
        meta = {"task": self.kind, "problem": self.problem, "model": self.model_kwargs,
                "class_names": self.class_names, "input_size": self.input_size,
                "mean": self.mean, "std": self.std, **self.meta_extra}
        if self.class_weights is not None:
            meta["class_weights"] = self.class_weights
        return meta

    def loss(self) -> Any:
        """The training (and validation) loss the CLI gives the Trainer: None (the Trainer's default),
        or a CrossEntropyLoss weighted per class by train.class_weights."""
        if self.class_weights is None:
            return None
        import torch

        # the Trainer moves a loss module to its device with the model; the Trainer's own default loss gets
        # label_smoothing from the settings, this one from the task
        return torch.nn.CrossEntropyLoss(weight=torch.tensor(self.class_weights["values"], dtype=torch.float32),
                                         label_smoothing=self.label_smoothing)


def is_csv(path: str | Path) -> bool:
    return Path(path).suffix.lower() in {".csv", ".tsv", ".txt"} and Path(path).is_file()


def prepare_task(config: RunConfig, run_dir: str | Path | None, *, progress: bool = False,
                 log: Callable[[str], None] | None = None) -> Task:
    """`log` gets the one-line report of the image cache (default: print, on rank 0 only)."""
    if not config.data.path:
        raise TorchwiseError("No data given.", values={"data.path": None},
                             fix="pass --data FOLDER (class folders) or --data FILE.csv --target COLUMN")
    if log is None:
        log = print if os.environ.get("RANK", "0") == "0" else (lambda _line: None)
    if is_csv(config.data.path):
        task = _prepare_tabular(config, run_dir)
    else:
        task = _prepare_image(config, run_dir, progress=progress, log=log)
    if task.class_weights is not None:
        task.summary["class_weights"] = describe_class_weights(task)
    for line in task.summary.get("warnings") or []:
        log(f"data: warning: {line}")
    return task


def check_class_split(class_names: list[str], train_counts: dict[str, int], val_counts: dict[str, int], *,
                      source: str) -> list[str]:
    """The split of a classification task, whatever made it (CSV rows or image folders): refuse a class
    with no training example (the model could never learn it); return a warning for a class with a
    single example and for a class that is in one split but not the other (said with names and counts)."""
    counts = {name: (int(train_counts.get(name, 0)), int(val_counts.get(name, 0))) for name in class_names}
    shown = lambda names: ", ".join(f"{n!r} (train {counts[n][0]}, val {counts[n][1]})" for n in names[:10]) + (  # noqa: E731
        f", ... ({len(names)} classes)" if len(names) > 10 else "")
    no_train = [n for n, (tr, _) in counts.items() if tr == 0]
    if no_train:
        raise TorchwiseError("Some classes have no training examples, so the model cannot learn them.",
                             values={"data": source, "classes without training examples": no_train[:20],
                                     "counts": shown(no_train)},
                             fix="add training examples of these classes, or remove them from the data; for a "
                                 "CSV file whose rows of these classes have missing values, --set "
                                 "data.missing=impute keeps those rows")
    warnings = []
    single = [n for n, (tr, va) in counts.items() if tr + va == 1]
    if single:
        warnings.append(f"{len(single)} class(es) with a single example: {shown(single)}; the model sees it once "
                        f"and validation cannot measure it")
    no_val = [n for n, (tr, va) in counts.items() if va == 0 and n not in single]
    if no_val:
        warnings.append(f"{len(no_val)} class(es) in training but not in validation: {shown(no_val)}; their "
                        f"validation metrics are empty (add examples, or raise data.val_fraction)")
    return warnings


def _class_weights(config: RunConfig, problem: str, train_labels: Any, class_names: list[str]
                   ) -> dict[str, Any] | None:
    """train.class_weights from the TRAINING split's labels (never the validation split's)."""
    scheme = config.train.class_weights
    if scheme == "none":
        return None
    if problem != "classification":
        raise ConfigError("train.class_weights is for classification, but this task is a regression.",
                          values={"train.class_weights": scheme, "problem": problem,
                                  "target": config.data.target},
                          fix="drop --set train.class_weights (or set it to none); class weights apply to the "
                              "cross-entropy loss of class labels")
    from torchwise.data.class_weights import class_weights

    labels = [int(label) for label in train_labels]
    counts = [0] * len(class_names)
    for label in labels:
        counts[label] += 1
    empty = [name for name, count in zip(class_names, counts) if count == 0]
    if empty:  # said here by class name, with the CLI's way out
        raise ConfigError(f"train.class_weights={scheme} needs every class in the training split, but some have "
                          "no training samples (their weight would be infinite).",
                          values={"classes without training samples": empty,
                                  "train counts": dict(zip(class_names, counts))},
                          fix="add training samples of these classes (or move some from val/ to train/), drop "
                              "the classes, or set train.class_weights=none")
    weights = class_weights(labels, num_classes=len(class_names), scheme=scheme)
    # 9 significant digits: the exact float32 weight the loss uses, without float32 noise in meta.json
    return {"scheme": scheme, "computed_from": "training split", "values": [float(f"{w:.9g}") for w in weights],
            "train_counts": counts}


def describe_class_weights(task: Task, limit: int = 10) -> str:
    """One line for the run log and the report: the scheme and each class's weight (and count)."""
    cw = task.class_weights
    if cw is None:
        return "none (unweighted loss)"
    items = [f"{name} {w:.4g} ({n})" for name, w, n in zip(task.class_names, cw["values"], cw["train_counts"])]
    if len(items) > limit:
        items = items[:limit] + [f"... ({len(items)} classes, all in meta.json)"]
    return f"{cw['scheme']}, from the {sum(cw['train_counts'])} training samples: " + ", ".join(items)


# ----------------------------------------------------------------------------- images


def _refuse_table_settings(d: Any) -> None:
    """--target and --problem regression are for CSV files: an image folder is a classification task."""
    if d.target:
        raise TorchwiseError("--target is for CSV files, but the data is an image folder.",
                             values={"data": d.path, "target": d.target},
                             fix="drop --target: the class of an image is the name of its folder")
    if d.problem == "regression":
        raise TorchwiseError("Image folders are a classification task.", values={"problem": d.problem},
                             fix="drop --problem (or set it to classification)")


def _image_stats(config: RunConfig, scan: Any, model_name: str, *, mode: str, channels: int, side: int,
                 cache: Any, run_dir: str | Path | None, progress: bool) -> tuple[list[float], list[float], str]:
    """(mean, std, where they come from): the run the --weights come from, ImageNet's for pretrained
    torchvision weights, else the training split's (cached in the run directory)."""
    from torchwise.data import imagefolder, stats, transforms

    d = config.data
    source_stats = _stats_of_weights(config.model.weights, channels)
    if source_stats is not None:
        mean, std = source_stats
        return mean, std, "the run the --weights come from"
    if config.model.weights and model_family(model_name) == "timm":
        _, mean, std = timm_input(model_name)
        if channels == 1:  # a grayscale input to an RGB-pretrained network: the average channel
            mean, std = [sum(mean) / len(mean)], [sum(std) / len(std)]
        return mean, std, "the statistics timm records for the pretrained weights, because --weights is used"
    if config.model.weights and model_family(model_name) == "torchvision":
        mean, std = stats.pretrained_stats(channels)
        return mean, std, "pretrained (ImageNet) statistics, because --weights is used"
    stat_tf = transforms.stats_transform(side, center_crop=d.center_crop)
    loader = imagefolder.ImageDataset(scan.train, stat_tf, mode=mode, cache=cache)
    key = stats.fingerprint([p for p, _ in scan.train], {"side": side, "crop": d.center_crop, "mode": mode})
    mean, std, cached = stats.cached_mean_std(
        run_dir, key, lambda: stats.compute_mean_std(lambda i: loader[i][0], len(loader), channels=channels,
                                                     seed=config.train.seed, progress=progress))
    return mean, std, "training split" + (" (cached)" if cached else "")


def _image_transforms(d: Any, side: int, mean: list[float], std: list[float]) -> tuple[Any, Any, Any, Any]:
    """(train transform, val transform, batch_augment, batch_eval): augmentation in the loader, or with
    data.augment_on=device fixed-size uint8 in the loader and the augmentation per batch on the device."""
    from torchwise.data import transforms

    policy = getattr(d, "augment_policy", "none")
    if d.augment_on != "device":
        return (transforms.train_transform(side, mean, std, crop_scale=d.crop_scale, hflip=d.hflip, policy=policy),
                transforms.val_transform(side, mean, std, center_crop=d.center_crop), None, None)
    if policy != "none":
        raise ConfigError("An augmentation policy runs in the loader, image by image.",
                          values={"data.augment_policy": policy, "data.augment_on": "device"},
                          fix="Use data.augment_on=cpu with data.augment_policy, or drop the policy.")
    from torchwise.data.device_augment import BatchAugment, BatchEval

    fixed = transforms.fixed_square_uint8(side, d.center_crop)
    batch_augment = BatchAugment.like_train_transform(size=side, mean=mean, std=std, crop_scale=d.crop_scale,
                                                      hflip=d.hflip)
    batch_eval = BatchEval.like_val_transform(size=side, mean=mean, std=std, center_crop=d.center_crop)
    return fixed, fixed, batch_augment, batch_eval


def _write_image_split(run_dir: str | Path, scan: Any) -> None:
    root = Path(scan.root)
    rel = lambda samples: [[str(Path(p).relative_to(root)), label] for p, label in samples]  # noqa: E731
    _write_json(Path(run_dir) / SPLIT_FILE, {"kind": "image", "root": str(root.resolve()),
                                             "layout": scan.layout, "train": rel(scan.train),
                                             "val": rel(scan.val),
                                             "skipped": [[p, r] for p, r in scan.skipped]})


def _prepare_image(config: RunConfig, run_dir: str | Path | None, *, progress: bool,
                   log: Callable[[str], None]) -> Task:
    from torchwise.data import imagefolder, transforms

    d = config.data
    _refuse_table_settings(d)
    scan = imagefolder.scan_image_folder(d.path, val_fraction=d.val_fraction, seed=config.train.seed,
                                         progress=progress, keep_decoded=d.cache != "off")
    split_warnings = check_class_split(scan.class_names, scan.class_counts(scan.train), scan.class_counts(scan.val),
                                       source=str(d.path))
    weights = _class_weights(config, "classification", [label for _, label in scan.train], scan.class_names)
    model_name = resolve_model_name(config.model.name, "image")
    gray = d.channels == "gray" or (d.channels == "auto" and scan.grayscale)
    mode, channels = ("L", 1) if gray else ("RGB", 3)
    side = image_side(config, model_name, scan.median_side)
    augmentation = transforms.decide_augmentation(d.crop_scale, d.hflip, d.center_crop, gray=gray,
                                                  median_side=scan.median_side, gray_pixels=scan.gray_pixels)
    # from here on the data settings are the decided ones (the cache size depends on the center crop)
    d = dataclasses.replace(d, crop_scale=augmentation.crop_scale, hflip=augmentation.hflip,
                            center_crop=augmentation.center_crop)
    config = dataclasses.replace(config, data=d)
    cache, cache_line = _image_cache(config, scan, mode, channels, side, progress=progress, log=log)
    log(f"data: image cache: {cache_line}")
    mean, std, stats_source = _image_stats(config, scan, model_name, mode=mode, channels=channels, side=side,
                                           cache=cache, run_dir=run_dir, progress=progress)
    train_tf, val_tf, batch_augment, batch_eval = _image_transforms(d, side, mean, std)
    train_ds = imagefolder.ImageDataset(scan.train, train_tf, mode=mode, cache=cache)
    val_ds = imagefolder.ImageDataset(scan.val, val_tf, mode=mode, cache=cache)
    if run_dir is not None:
        _write_image_split(run_dir, scan)
    summary = scan.summary()
    if split_warnings:
        summary["warnings"] = list(summary.get("warnings") or []) + split_warnings
    summary.update({"input": f"{channels}x{side}x{side}", "normalization": stats_source, "cache": cache_line,
                    "augmentation": ("on the device, per batch" if batch_augment is not None else "in the loader")
                    + f": {augmentation.describe()}"})
    return Task(
        kind="image", problem="classification", train=train_ds, val=val_ds, class_names=scan.class_names,
        input_size=[channels, side, side], mean=mean, std=std,
        model_kwargs={"name": model_name, "num_classes": len(scan.class_names), "in_channels": channels,
                      "input_size": [side, side], "freeze_backbone": config.model.freeze_backbone},
        summary=summary,
        meta_extra={"image": {"mode": mode, "size": side, "center_crop": d.center_crop}},
        val_image=val_ds.load_image, val_ids=[p for p, _ in scan.val],
        batch_augment=batch_augment, batch_eval=batch_eval, class_weights=weights,
        label_smoothing=config.train.label_smoothing,
    )


def _image_cache(config: RunConfig, scan: Any, mode: str, channels: int, side: int, *, progress: bool,
                 log: Callable[[str], None]) -> tuple[Any, str]:
    """(ImageCache or None, one line saying which cache and why) for data.cache (image_cache.py)."""
    from torchwise.data import cache_budget, image_cache

    d = config.data
    paths = sorted({p for p, _ in scan.train + scan.val})
    cache_side = cache_budget.cache_side(side, d.center_crop)
    nbytes = cache_budget.estimate_bytes((scan.sizes[p] for p in paths), channels, cache_side)
    root = Path(d.cache_dir).expanduser() if d.cache_dir else cache_budget.default_root()
    kind, why = cache_budget.choose_mode(d.cache, nbytes, root)
    started = time.perf_counter()
    threads = max(1, min(8, os.cpu_count() or 1))
    cache = None
    if kind == "memory":
        cache = image_cache.build_memory(paths, scan.sizes, mode=mode, side=cache_side, decoded=scan.cache,
                                         threads=threads, progress=progress)
    elif kind == "disk":
        cache = image_cache.open_or_build_disk(paths, scan.sizes, mode=mode, side=cache_side, root=root,
                                               decoded=scan.cache, threads=threads, progress=progress, log=log)
    scan.cache = {}  # the full-size decoded images are not needed any more
    if cache is None:
        return None, f"off ({why}): every image is decoded from its file at every use"
    return cache, f"{kind} ({why}): {cache.describe()}, ready in {time.perf_counter() - started:.1f} s"


def _stats_of_weights(weights: str | None, channels: int) -> tuple[list[float], list[float]] | None:
    """Pretrained weights expect inputs normalized as in their own training: when the file comes
    from a torchwise run (RUN/final/model.safetensors, RUN/checkpoints/step-N/...), use that run's
    mean/std; otherwise None (the caller decides)."""
    if not weights:
        return None
    for folder in list(Path(weights).resolve().parents)[:3]:
        for meta_path in (folder / "meta.json", folder / "final" / "meta.json"):
            if meta_path.is_file():
                try:
                    meta = json.loads(meta_path.read_text())
                except ValueError:
                    return None
                if meta.get("task") == "image" and len(meta.get("mean") or []) == channels:
                    return list(meta["mean"]), list(meta["std"])
                return None
    return None


# ----------------------------------------------------------------------------- tables


def _tensor_datasets(x, y, mean, std, problem: str, target_mean: float, target_std: float):
    import torch
    from torch.utils.data import TensorDataset

    xs = (torch.from_numpy(x) - torch.tensor(mean)) / torch.tensor(std)
    if problem == "classification":
        ys = torch.from_numpy(y).long()
    else:  # standardized target, shaped like the model's [N, 1] output so MSELoss does not broadcast
        ys = ((torch.from_numpy(y).float() - target_mean) / target_std).unsqueeze(1)
    return TensorDataset(xs.float(), ys)


def _prepare_tabular(config: RunConfig, run_dir: str | Path | None) -> Task:
    from torchwise.data import tabular

    d = config.data
    data = tabular.load_tabular(d.path, d.target, problem=d.problem, val_fraction=d.val_fraction,
                                seed=config.train.seed, missing=d.missing, max_categories=d.max_categories,
                                decimal=d.decimal)
    summary = data.summary()
    if data.problem == "classification":
        split_warnings = check_class_split(data.class_names, summary["train_counts"], summary["val_counts"],
                                           source=str(d.path))
        if split_warnings:
            summary["warnings"] = list(summary.get("warnings") or []) + split_warnings
    weights = _class_weights(config, data.problem, data.y_train, data.class_names)
    model_name = resolve_model_name(config.model.name, "tabular")
    n_features = len(data.mean)
    args = (data.mean, data.std, data.problem, data.target_mean, data.target_std)
    train_ds = _tensor_datasets(data.x_train, data.y_train, *args)
    val_ds = _tensor_datasets(data.x_val, data.y_val, *args)
    if run_dir is not None:
        _write_json(Path(run_dir) / SPLIT_FILE, {"kind": "tabular", "root": str(Path(d.path).resolve()),
                                                 "train_rows": data.train_rows, "val_rows": data.val_rows})
    outputs = len(data.class_names) if data.problem == "classification" else 1
    return Task(
        kind="tabular", problem=data.problem, train=train_ds, val=val_ds, class_names=data.class_names,
        input_size=[n_features], mean=data.mean, std=data.std,
        model_kwargs={"name": model_name, "num_classes": outputs, "in_channels": n_features, "input_size": None,
                      "freeze_backbone": config.model.freeze_backbone},
        summary=summary, meta_extra={"tabular": data.tabular_meta()},
        val_ids=[f"row {r + 2}" for r in data.val_rows],  # +2: 1-based line numbers after the header
        class_weights=weights, label_smoothing=config.train.label_smoothing,
    )


# ----------------------------------------------------------------------------- eval


def eval_task(run_dir: str | Path, meta: dict[str, Any], data: str | Path | None = None) -> Task:
    """The labelled data to evaluate a finished run on: its own validation split, or `data`."""
    run_dir = Path(run_dir)
    if meta["task"] == "image":
        return _eval_image(run_dir, meta, data)
    return _eval_tabular(run_dir, meta, data)


def _eval_image(run_dir: Path, meta: dict[str, Any], data: str | Path | None) -> Task:
    from torchwise.data import imagefolder, transforms

    image = meta["image"]
    class_names = meta["class_names"]
    skipped: list[tuple[str, str]] = []
    if data is None:
        split = _read_split(run_dir)
        root = Path(split["root"])
        samples = [(str(root / p), label) for p, label in split["val"]]
        source = f"validation split of {root}"
    else:
        samples, skipped = _labelled_images(Path(data), class_names)
        source = str(data)
    tf = transforms.val_transform(image["size"], meta["mean"], meta["std"], center_crop=image["center_crop"])
    ds = imagefolder.ImageDataset(samples, tf, mode=image["mode"])
    counts = {name: 0 for name in class_names}
    for _, label in samples:
        counts[class_names[label]] += 1
    return Task(kind="image", problem="classification", train=None, val=ds, class_names=class_names,
                input_size=meta["input_size"], mean=meta["mean"], std=meta["std"], model_kwargs=meta["model"],
                summary={"source": source, "val_counts": counts,
                         "skipped": [{"path": p, "reason": r} for p, r in skipped]},
                val_image=ds.load_image, val_ids=[p for p, _ in samples])


def _labelled_images(folder: Path, class_names: list[str]) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """All readable images of `folder` (class folders, or its val/ folder) labelled by folder name."""
    from torchwise.data import class_folders, image_decode

    if not folder.is_dir():
        raise TorchwiseError("The evaluation data is not a folder (this run is an image run).",
                             values={"path": str(folder), "exists": folder.exists()},
                             fix="pass --data with a folder of class folders, named like the training classes")
    sub = class_folders.find_subfolder(folder, class_folders.VAL_DIRS)
    folder = sub or folder
    class_dirs = class_folders.list_class_dirs(folder, "evaluation folder")
    names = {p: class_folders.class_name_of(p) for p in class_dirs}  # read as the training scan reads them
    unknown = [names[p] for p in class_dirs if names[p] not in class_names]
    if unknown:
        raise TorchwiseError("The evaluation folder has classes the model was not trained on.",
                             values={"unknown": unknown, "trained classes": class_names},
                             fix="evaluate on folders named like the training classes")
    samples, skipped = [], []
    for class_dir in class_dirs:
        for path in class_folders.image_files(class_dir):
            image, reason = image_decode.decode_image(str(path))
            if image is None:
                skipped.append((str(path), reason or "unreadable"))
            else:
                samples.append((str(path), class_names.index(names[class_dir])))
    if not samples:
        raise TorchwiseError("No readable images to evaluate.", values={"folder": str(folder),
                                                                       "skipped": len(skipped)},
                             fix="put images in class folders under the folder")
    return samples, skipped


def _eval_tabular(run_dir: Path, meta: dict[str, Any], data: str | Path | None) -> Task:
    from torchwise.data import tabular

    tab = meta["tabular"]
    if data is None:
        split = _read_split(run_dir)
        path, rows = split["root"], split["val_rows"]
        source = f"validation rows of {path}"
    else:
        path, rows, source = str(data), None, str(data)
    x, y, notes = tabular.encode_for_eval(path, tab, meta["class_names"], meta["problem"], rows)
    ds = _tensor_datasets(x, y, meta["mean"], meta["std"], meta["problem"], tab["target_mean"], tab["target_std"])
    ids = [f"row {r + 2}" for r in rows] if rows is not None else [f"example {i}" for i in range(len(y))]
    return Task(kind="tabular", problem=meta["problem"], train=None, val=ds, class_names=meta["class_names"],
                input_size=meta["input_size"], mean=meta["mean"], std=meta["std"], model_kwargs=meta["model"],
                summary={"source": source, **notes}, meta_extra={"tabular": tab}, val_ids=ids)


def _read_split(run_dir: Path) -> dict[str, Any]:
    path = run_dir / SPLIT_FILE
    if not path.is_file():
        raise TorchwiseError("The run has no split.json, so its validation split is unknown.",
                             values={"run": str(run_dir)}, fix="pass --data with labelled data to evaluate on")
    return json.loads(path.read_text())


def _write_json(path: Path, data: Any) -> None:
    """Atomically (a crash or a full disk leaves the previous split.json, never half of one), with the
    layout split.json has always had (indent 1, keys in their order)."""
    write_text(path, json.dumps(data, indent=1))
