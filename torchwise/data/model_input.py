"""Which model a data set gets, and the input side its images are brought to."""
from __future__ import annotations

from torchwise.config import RunConfig
from torchwise.errors import TorchwiseError
from torchwise.models.names import model_family, timm_input

# Side used for torchvision architectures when data.image_size is not set: what they were designed for.
TORCHVISION_SIDE = 224
# smallcnn / mlp take the images' median side up to this (bigger images are downscaled).
SMALL_MODEL_MAX_SIDE = 64


def resolve_model_name(name: str, kind: str) -> str:
    if name == "auto":
        return "smallcnn" if kind == "image" else "mlp"
    if kind == "tabular" and name != "mlp" and model_family(name) != "user":
        raise TorchwiseError("A CSV task needs a model for feature vectors.", values={"model": name},
                             fix="use --model mlp (the default for CSV files) or your own pkg.module:callable")
    return name


def image_side(config: RunConfig, model_name: str, median_side: int) -> int:
    if config.data.image_size:
        return config.data.image_size
    family = model_family(model_name)
    if family == "timm":  # the side its pretrained weights were trained at (a ViT's position embeddings need it)
        return timm_input(model_name)[0]
    if family in ("builtin", "user"):
        return max(4, min(median_side or 32, SMALL_MODEL_MAX_SIDE))
    return TORCHVISION_SIDE
