"""Images to input tensors: resize (or letterbox), channel order, normalization, layout.

Presets follow each model family's published preprocessing, so a folder of photos is
calibration data without a line of code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from PIL import Image, UnidentifiedImageError

from trtconv.errors import DataError, UsageError
from trtconv.load import dims_text

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

PRESETS: dict[str, dict[str, Any]] = {
    # PaddleOCR's documented preprocessing (ppocr/data/imaug: DetResizeForTest, NormalizeImage, RecResizeImg)
    "ppocr-det": {"channel_order": "BGR", "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
                  "multiple_of": 32},
    "ppocr-rec": {"channel_order": "BGR", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "size": (48, None)},
    "ppocr-cls": {"channel_order": "BGR", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "size": (48, 192)},
    "imagenet": {"channel_order": "RGB", "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
                 "size": (224, 224)},
    # YOLO-style detectors (Ultralytics' LetterBox): keep the aspect ratio, pad with gray 114, RGB in [0, 1]
    "yolo": {"channel_order": "RGB", "size": (640, 640), "letterbox": True, "pad_value": 114.0, "multiple_of": 32},
}


@dataclass(frozen=True)
class ImagePreprocess:
    """Image → tensor: ``((pixel * scale) - mean) / std`` per channel, then layout and batch dim 1.

    ``letterbox`` fits the image into the target size keeping its aspect ratio and pads
    the rest with ``pad_value`` (YOLO-style detectors; preset ``yolo``).
    ``size`` is (H, W); a ``None`` entry follows the aspect ratio (or keeps the image's
    size if both are None). A fixed H/W in the model overrides ``None``. ``multiple_of``
    rounds free dims to a multiple (PP-OCR det needs 32).
    """

    size: tuple[int | None, int | None] = (None, None)
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    channel_order: Literal["RGB", "BGR", "GRAY"] = "RGB"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    multiple_of: int = 1
    max_side: int | None = None  # cap the longer side before rounding (det models on big photos)
    letterbox: bool = False  # resize keeping the aspect ratio into the target size, pad the rest
    pad_value: float = 114.0  # letterbox padding, in pixel units (before scale/mean/std)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ImagePreprocess:
        if name not in PRESETS:
            raise UsageError(f"unknown preprocessing preset {name!r}", hint=f"choose from {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def parse(cls, spec: str) -> ImagePreprocess:
        """``"preset=ppocr-rec,size=48x320"`` or ``"size=224x224,order=bgr,mean=0.5/0.5/0.5,std=...,scale=1/255,layout=nhwc"``."""
        fields: dict[str, Any] = {}
        preset = None
        for item in (p.strip() for p in spec.split(",") if p.strip()):
            key, sep, val = item.partition("=")
            key, val = key.strip().lower(), val.strip()
            if not sep and key in PRESETS:  # a bare preset name, as the help lists them: `--preprocess ppocr-cls`
                key, sep, val = "preset", "=", key
            if not sep or not val:
                raise UsageError(f"bad preprocessing item {item!r}",
                                 hint=f"write key=value, e.g. size=224x224, or a preset: {', '.join(PRESETS)}")
            try:
                if key == "preset":
                    preset = val
                elif key == "size":
                    h, _, w = val.lower().partition("x")
                    fields["size"] = (_opt_int(h), _opt_int(w))
                elif key == "layout":
                    fields["layout"] = _choice(val.upper(), ("NCHW", "NHWC"), key)
                elif key in ("order", "channel_order", "channels"):
                    fields["channel_order"] = _choice(val.upper(), ("RGB", "BGR", "GRAY"), key)
                elif key == "scale":
                    num, _, den = val.partition("/")
                    fields["scale"] = float(num) / (float(den) if den else 1.0)
                elif key in ("mean", "std"):
                    fields[key] = tuple(float(v) for v in val.split("/"))
                elif key in ("multiple", "multiple_of"):
                    fields["multiple_of"] = int(val)
                elif key == "max_side":
                    fields["max_side"] = int(val)
                elif key == "letterbox":
                    fields["letterbox"] = _flag(val)
                elif key in ("pad", "pad_value"):
                    fields["pad_value"] = float(val)
                else:
                    raise UsageError(
                        f"unknown preprocessing key {key!r}",
                        hint="keys: preset, size, layout, order, scale, mean, std, multiple_of, max_side, letterbox, pad",
                    )
            except ValueError as exc:
                raise UsageError(f"bad preprocessing value in {item!r}: {exc}") from exc
        pp = cls.preset(preset) if preset else cls()
        pp = replace(pp, **fields)
        if pp.channel_order == "GRAY":  # one value for one channel where the three given or defaulted agree
            for key in ("mean", "std"):
                vals = getattr(pp, key)
                if key not in fields and len(vals) == 3 and len(set(vals)) == 1:
                    pp = replace(pp, **{key: vals[:1]})
        pp.validate()
        return pp

    def validate(self) -> None:
        channels = 1 if self.channel_order == "GRAY" else 3
        for name, vals in (("mean", self.mean), ("std", self.std)):
            if len(vals) not in (1, channels):
                raise UsageError(f"preprocessing {name} has {len(vals)} values; the image has {channels} channels")
        if any(s == 0 for s in self.std):
            raise UsageError("preprocessing std contains 0")
        if self.multiple_of < 1:
            raise UsageError("preprocessing multiple_of must be >= 1")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["size"] = list(self.size)
        d["mean"] = list(self.mean)
        d["std"] = list(self.std)
        return d


def _opt_int(v: str) -> int | None:
    v = v.strip()
    return None if v in ("", "?", "*", "n", "none") else int(v)


def _flag(val: str) -> bool:
    low = val.lower()
    if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise ValueError(f"{val!r} is not a yes/no value")
    return low in ("1", "true", "yes", "on")


def _choice(val: str, allowed: tuple[str, ...], key: str) -> str:
    if val not in allowed:
        raise UsageError(f"preprocessing {key}={val!r}", hint=f"choose from {', '.join(allowed)}")
    return val


def preprocess_warnings(pp: ImagePreprocess | None, dims: Sequence[int | str | None], folder: str) -> list[str]:
    """What the images of ``folder`` become that the user did not say: the default preprocessing when
    none was given (calibration and the gate see what it makes, so a model trained on other
    normalization is calibrated on the wrong data), and a ``size`` the model's fixed H/W overrides."""
    out: list[str] = []
    if len(dims) != 4:
        return out
    layout = (pp or ImagePreprocess()).layout
    hw = [dims[a] for a in ((2, 3) if layout == "NCHW" else (1, 2))]
    fixed = [d if isinstance(d, int) else None for d in hw]
    if pp is None:
        size = "resized to the model's " + "x".join(map(str, fixed)) if None not in fixed else \
            "at their own size" if fixed == [None, None] else "resized to the model's fixed side"
        out.append(f"--calib-data {folder}: images read with the default preprocessing (RGB, pixels x 1/255, no "
                   f"mean/std, NCHW, {size}): calibration and the accuracy gate see exactly this, so give your "
                   "model's own with --preprocess (a preset: " + ", ".join(PRESETS) + "; or size=HxW,order=,"
                   "mean=,std=)")
    elif any(f is not None and g is not None and f != g for f, g in zip(fixed, pp.size)):
        out.append(f"--preprocess resizes to {'x'.join(str(g) for g in pp.size)} (height x width), but the model "
                   f"fixes its input's to {'x'.join(str(f if f is not None else '-1') for f in fixed)}; images are "
                   "resized to the model's")
    return out


def _round_to(v: float, multiple: int) -> int:
    return max(multiple, int(round(v / multiple)) * multiple)


def _target_size(
    pp: ImagePreprocess, img_hw: tuple[int, int], fixed: tuple[int | None, int | None]
) -> tuple[int, int]:
    h0, w0 = img_hw
    want_h = fixed[0] if fixed[0] is not None else pp.size[0]
    want_w = fixed[1] if fixed[1] is not None else pp.size[1]
    h: float
    w: float
    if want_h is None and want_w is None:
        ratio = 1.0
        if pp.max_side and max(h0, w0) > pp.max_side:
            ratio = pp.max_side / max(h0, w0)
        h, w = h0 * ratio, w0 * ratio
    elif want_h is None:
        assert want_w is not None
        h, w = h0 * (want_w / w0), float(want_w)
    elif want_w is None:
        h, w = float(want_h), w0 * (want_h / h0)
    else:
        h, w = float(want_h), float(want_w)
    mh = 1 if fixed[0] is not None else pp.multiple_of
    mw = 1 if fixed[1] is not None else pp.multiple_of
    return _round_to(h, mh), _round_to(w, mw)


class TensorSpec(Protocol):
    """What an image becomes: the input's element type and dims (``samples.sources.InputSpec``)."""

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def dims(self) -> Sequence[int | str | None]: ...


def _letterbox(im: Image.Image, h: int, w: int, pad: float) -> np.ndarray:
    """``im`` scaled to fit (h, w) with its aspect ratio kept, centred on a ``pad``-filled canvas."""
    r = min(h / im.height, w / im.width)
    nh, nw = max(1, round(im.height * r)), max(1, round(im.width * r))
    if (nh, nw) != (im.height, im.width):
        im = im.resize((nw, nh), Image.Resampling.BILINEAR)
    body = np.asarray(im, dtype=np.float32)
    if body.ndim == 2:
        body = body[:, :, None]
    canvas = np.full((h, w, body.shape[2]), pad, dtype=np.float32)
    top, left = (h - nh) // 2, (w - nw) // 2
    canvas[top:top + nh, left:left + nw] = body
    return canvas


def _channels_hint(pp: ImagePreprocess, dims: Sequence[int | str | None], want_c: int) -> str:
    """What to add to --preprocess: the other layout where the model's channels sit there (an NHWC
    input [1, 224, 224, 3] read as NCHW has 224 channels), else the channel order that gives want_c."""
    other, axis = ("NHWC", 3) if pp.layout == "NCHW" else ("NCHW", 1)
    there = dims[axis]
    if isinstance(there, int) and there in (1, 3):
        order = ",order=gray" if there == 1 and pp.channel_order != "GRAY" else (
            ",order=rgb" if there == 3 and pp.channel_order == "GRAY" else "")
        return (f"add layout={other.lower()}{order} to --preprocess: the model's input is {dims_text(dims)}, "
                f"{there} channel(s) {'last' if other == 'NHWC' else 'first'}")
    if want_c == 1:
        return "add order=gray to --preprocess: the model takes 1-channel images"
    if want_c == 3:
        return "add order=rgb (or order=bgr, as the model was trained) to --preprocess: the model takes 3-channel images"
    return f"the model's input has {want_c} channels, which no image gives: give .npy/.npz samples instead"


def load_image(path: Path, pp: ImagePreprocess, spec: TensorSpec) -> np.ndarray:
    """Read one image and turn it into the model's input tensor (batch of one)."""

    dims = spec.dims
    if len(dims) != 4:
        raise DataError(
            f"{path}: image data needs a 4-D image input, the model's input has rank {len(dims)}",
            hint="give .npy/.npz samples instead",
        )
    hw_axes = (2, 3) if pp.layout == "NCHW" else (1, 2)
    c_axis = 1 if pp.layout == "NCHW" else 3
    other = 3 if pp.layout == "NCHW" else 1
    there = dims[other]
    if not isinstance(dims[c_axis], int) and isinstance(there, int) and there in (1, 3):
        # e.g. [N, H, W, 3] read as NCHW: W would be resized to 3 pixels and the model fed a wrong tensor
        raise DataError(f"{path}: the model's input {dims_text(dims)} has {there} channels "
                        f"{'last' if other == 3 else 'first'}, and the images are laid out {pp.layout}",
                        hint=_channels_hint(pp, dims, there))
    fixed = tuple(d if isinstance(d, int) else None for d in (dims[hw_axes[0]], dims[hw_axes[1]]))
    try:
        with Image.open(path) as raw:
            raw.load()
            im = raw.convert("L" if pp.channel_order == "GRAY" else "RGB")
            h, w = _target_size(pp, (im.height, im.width), fixed)  # type: ignore[arg-type]
            if pp.letterbox:
                arr = _letterbox(im, h, w, pp.pad_value)
            else:
                if (h, w) != (im.height, im.width):
                    im = im.resize((w, h), Image.Resampling.BILINEAR)
                arr = np.asarray(im, dtype=np.float32)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError,
            MemoryError, EOFError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: cannot read image ({msg})", hint="remove or replace the file") from exc
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if pp.channel_order == "BGR":
        arr = arr[:, :, ::-1]
    channels = arr.shape[2]
    want_c = dims[c_axis]
    if isinstance(want_c, int) and want_c != channels:
        raise DataError(f"{path}: preprocessing gives {channels} channels, the model's input wants {want_c} "
                        f"(its dims {dims_text(dims)} read as {pp.layout})", hint=_channels_hint(pp, dims, want_c))
    mean = np.asarray(pp.mean, dtype=np.float32)
    std = np.asarray(pp.std, dtype=np.float32)
    arr = (arr * np.float32(pp.scale) - mean) / std
    if pp.layout == "NCHW":
        arr = arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr[None]).astype(spec.dtype, copy=False)


