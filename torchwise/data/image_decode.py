"""Decoding one image file into the pixels torchwise trusts: 8-bit "L" or "RGB", by the real bit depth.

Every image torchwise reads (the folder scan, the image cache, training, validation, prediction) goes
through `open_image`, so a file decodes to the same pixels on every path: 16-bit and float pixels are
scaled by their real depth (never saturated, never clipped to black), transparency is composited over
white, and a file whose scale cannot be known is refused (UnreadableImage, saying why).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# Transparent pixels are composited over this gray level (white), see to_standard.
ALPHA_BACKGROUND = 255
# open_image records the file's own pixel mode (I;16, P, RGBA, ...) in image.info under this key.
SOURCE_MODE = "torchwise_source_mode"
GRAY_MODES = {"1", "L", "LA", "I", "I;16", "F"}
MODE_NAMES = {"1": "1-bit", "L": "8-bit gray", "P": "palette", "RGB": "8-bit RGB", "RGBA": "RGB + alpha",
              "LA": "gray + alpha", "PA": "palette + alpha", "I;16": "16-bit gray", "I;16B": "16-bit gray",
              "I;16L": "16-bit gray", "I": "32-bit integer gray", "F": "32-bit float gray", "CMYK": "CMYK",
              "YCbCr": "YCbCr"}


class UnreadableImage(Exception):
    """A file that does not decode into pixels torchwise can trust; the message says why."""


def _fraction_to_uint8(values: Any):
    import numpy as np

    return np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)


def _integer_full_scale(image: Any, values: Any, bits: int | None) -> int:
    """The value that means "white" for an integer image: from its mode or its recorded bit depth.
    PNG and PGM/PPM files with more than 8 bits open as 16-bit values (mode "I;16" or "I")."""
    if image.mode.startswith("I;16"):
        return 65535
    if bits is not None and bits > 16:
        # Scaled by 2^32 - 1 such images (often 16-bit data in a 32-bit container) would all be black.
        raise UnreadableImage(f"{bits}-bit integer pixels (up to {int(values.max(initial=0))}): torchwise reads "
                              "1-, 8- and 16-bit integer and [0, 1] float images; save it with 16 bits per pixel")
    if bits is None and int(values.max(initial=0)) > 65535:
        raise UnreadableImage(f"32-bit integer pixels (up to {int(values.max())}) with no recorded bit depth: "
                              "their scale is unknown; save the image with 8 or 16 bits per pixel")
    return 2 ** (bits or 16) - 1


def _composite(values: Any, alpha: Any):
    """Colour over the white background: transparent pixels become white, as a page shows them."""
    import numpy as np

    a = alpha.astype(np.float32)[..., None] / 255.0 if values.ndim == 3 else alpha.astype(np.float32) / 255.0
    out = values.astype(np.float32) * a + ALPHA_BACKGROUND * (1.0 - a)
    return np.rint(out).clip(0, 255).astype(np.uint8)


def _gray_palette(image: Any) -> bool:
    palette = image.getpalette() or []
    used = {index for _, index in (image.getcolors(256) or [])}
    triples = [palette[3 * i:3 * i + 3] for i in used if 3 * i + 2 < len(palette)]
    return bool(triples) and all(t[0] == t[1] == t[2] for t in triples)


def _float_to_standard(image: Any):
    """A 32-bit float ("F") image as a fraction in [0, 1]: anything outside (or NaN, inf) has no known scale."""
    import numpy as np
    from PIL import Image

    values = np.asarray(image, dtype=np.float32)
    if values.size and not np.isfinite(values).all():
        raise UnreadableImage("32-bit float pixels include NaN or infinity")
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if low < 0.0 or high > 1.0:
        raise UnreadableImage(f"32-bit float pixels span [{low:.4g}, {high:.4g}], not [0, 1]: their scale "
                              "is unknown; save them as fractions in [0, 1] or as 8- or 16-bit integers")
    return Image.fromarray(_fraction_to_uint8(values))


def _integer_to_standard(image: Any, bits: int | None):
    """An integer ("I", "I;16...") gray image scaled by its bit depth to 8 bits."""
    import numpy as np
    from PIL import Image

    values = np.asarray(image)
    if values.ndim != 2:
        raise UnreadableImage(f"pixel mode {image.mode} with shape {values.shape} is not supported")
    values = values.astype(np.int64)
    if values.size and int(values.min()) < 0:
        raise UnreadableImage(f"integer pixels below zero (down to {int(values.min())}): their scale is unknown")
    full = _integer_full_scale(image, values, bits)
    if values.size and int(values.max()) > full:
        raise UnreadableImage(f"pixel values up to {int(values.max())} exceed the {full} of the recorded bit depth")
    return Image.fromarray(_fraction_to_uint8(values / full))


def _colour_to_standard(image: Any):
    """Palette, transparent and other colour modes: alpha composited over white, a gray palette as "L",
    the rest through Pillow's conversion to "RGB"."""
    import numpy as np
    from PIL import Image

    mode = image.mode
    if mode in ("La", "RGBa", "PA"):  # premultiplied alpha, or a palette with an alpha band
        image = image.convert("LA" if mode == "La" else "RGBA")
        mode = image.mode
    if mode == "P":
        if "transparency" not in image.info:
            return image.convert("L" if _gray_palette(image) else "RGB")
        image, mode = image.convert("RGBA"), "RGBA"
    if mode == "LA":
        values = np.asarray(image)
        return Image.fromarray(_composite(values[..., 0], values[..., 1]))
    if mode == "RGBA":
        values = np.asarray(image)
        return Image.fromarray(_composite(values[..., :3], values[..., 3]))
    try:
        return image.convert("RGB")
    except (ValueError, OSError) as exc:
        raise UnreadableImage(f"pixel mode {mode} cannot be converted to RGB ({exc})") from None


def to_standard(image: Any, *, bits: int | None = None):
    """Any PIL image -> an 8-bit "L" (gray sources) or "RGB" (colour sources) PIL image, scaled by the
    image's real bit depth (never saturated, never clipped to black).

    * "L", "RGB": unchanged. "1": 0 / 255.
    * 16-bit gray ("I;16", "I;16B", "I;16L", and "I" opened from 16-bit PNG/PGM/TIFF): value * 255 / 65535,
      rounded, so 8-bit value v and 16-bit value 257 v decode alike (a mixed folder is on one scale).
      "I" with a recorded bit depth up to 16 (TIFF BitsPerSample, `bits`) uses it; deeper integers and
      negative values are refused (their scale is unknown, and 2^32 - 1 as white would make them black).
    * 32-bit float ("F"): taken as a fraction in [0, 1] (x 255); values outside, NaN or inf are refused
      (their scale is unknown).
    * Transparency ("RGBA", "LA", "PA", "P" with a transparent colour, premultiplied "RGBa"/"La"):
      composited over white (ALPHA_BACKGROUND): the colour under a fully transparent pixel is
      arbitrary (often black or garbage), so dropping alpha would train on invisible pixels.
    * Palette ("P"): its colours; "L" when every palette colour it uses is gray.
    * "CMYK", "YCbCr", "LAB", "HSV", "RGBX", ...: Pillow's conversion to "RGB".

    Raises UnreadableImage (its message says why) for pixels whose scale cannot be known."""
    mode = image.mode
    if mode in ("L", "RGB"):
        return image
    if mode == "1":
        return image.convert("L")
    if mode == "F":
        return _float_to_standard(image)
    if mode.startswith("I"):
        return _integer_to_standard(image, bits)
    return _colour_to_standard(image)


def describe_modes(modes: dict[str, int]) -> str:
    """One line: the files' own pixel formats and how they were brought to 8 bits."""
    if not modes:
        return "none"
    parts = [f"{MODE_NAMES.get(m, m)} ({m}): {n}" for m, n in sorted(modes.items(), key=lambda kv: (-kv[1], kv[0]))]
    notes = []
    if any(m.startswith("I") or m == "F" for m in modes):
        notes.append("16/32-bit scaled to 8 bits by bit depth")
    if any(m in ("RGBA", "LA", "PA", "RGBa", "La") for m in modes):
        notes.append("transparency composited over white")
    return ", ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")


def to_mode(image: Any, mode: str):
    """Any PIL image -> `mode` ("L" or "RGB", what the model takes), through to_standard: gray sources
    become RGB by repeating the channel, colour sources become L by their luminance."""
    image = to_standard(image)
    return image if image.mode == mode else image.convert(mode)


def _recorded_bits(image: Any) -> int | None:
    tags = getattr(image, "tag_v2", None)           # TIFF: BitsPerSample
    try:
        value = tags.get(258) if tags is not None else None
    except Exception:
        return None
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) and 0 < value <= 32 else None


def open_image(path: str | Path):
    """The one way torchwise reads an image file: decode every byte, apply the EXIF orientation (phone
    photos are stored sideways with a "rotate" tag), then to_standard (8-bit "L" or "RGB" by the real
    bit depth). The first frame of an animated or multi-page file. Raises UnreadableImage."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as opened:
            opened.load()  # decodes every byte: catches truncated files that Image.verify() lets through
            bits = _recorded_bits(opened)
            image = ImageOps.exif_transpose(opened)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, ...
        raise UnreadableImage(f"{type(exc).__name__}: {exc}".splitlines()[0][:200]) from None
    source = image.mode
    image = to_standard(image, bits=bits)
    image.info[SOURCE_MODE] = source
    return image


def decode_image(path: str) -> tuple[Any, str | None]:
    """(image, None) when the file decodes completely (an 8-bit "L" or "RGB" PIL image, see open_image),
    else (None, reason)."""
    try:
        return open_image(path), None
    except UnreadableImage as exc:
        return None, str(exc)


# A colour pixel differs between its channels by more than this many levels; gray stored as RGB
# (a JPEG, a composited RGBA scan) differs by a few levels of compression noise at most.
COLOUR_SPREAD = 24


def has_gray_pixels(image: Any) -> bool:
    """Whether a decoded image (see open_image) shows only grays, whatever its file stored: a digit
    saved as an RGB JPEG or an RGBA PNG is as gray as an "L" PNG. At most 1 pixel in 1000 may be
    coloured (stray compression noise); larger images are looked at reduced to about 64 pixels."""
    import numpy as np

    if image.mode == "L":
        return True
    factor = max(1, min(image.size) // 64)
    values = np.asarray(image.reduce(factor) if factor > 1 else image, dtype=np.int16)
    spread = values.max(axis=2) - values.min(axis=2)
    return float((spread > COLOUR_SPREAD).mean()) <= 0.001


def read_image(path: str | Path, mode: str):
    """open_image, then to_mode(mode): what training, validation and prediction feed the transforms."""
    return to_mode(open_image(path), mode)
