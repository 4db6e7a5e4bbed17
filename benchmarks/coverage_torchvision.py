"""torchvision models for benchmarks/build_coverage.py: classifiers, segmenters, detectors.

Built by their constructors with ``weights=None, weights_backbone=None`` after ``torch.manual_seed(0)``
(nothing downloaded), small inputs, exported by ``torch.onnx.export(..., dynamo=False,
opset_version=17)``. torchvision often cannot be imported beside the project's torch, so the export
runs in a child interpreter given by ``--torchvision-python``: this file itself, run as
``python coverage_torchvision.py NAME VARIANT OUT.onnx`` (stdlib imports only at the top).
Make one with ``python3 -m venv v && v/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx``.
Classifiers are exported with a dynamic batch (the benchmark passes ``--shapes``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from coverage_models import Generated, first_line

FAMILY = "torchvision"
CLASSIFIERS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x0_5",
               "convnext_tiny")
SEGMENTERS = ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50")
DETECTORS = ("ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn", "retinanet_resnet50_fpn",
             "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn")
SIDE = {"classifier": 64, "segmenter": 96, "detector": 320}
TIMEOUT = 900


def kind(name: str) -> str:
    return "classifier" if name in CLASSIFIERS else "segmenter" if name in SEGMENTERS else "detector"


def export_in_child(python: str, name: str, variant: str, out: Path) -> dict[str, tuple[int, ...]]:
    """Export ``name`` (``variant``: plain, uint8-nhwc or float64) with the given interpreter; its
    example input shapes. Raises RuntimeError with the child's last line when it fails."""
    proc = subprocess.run([python, __file__, name, variant, str(out)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise RuntimeError(tail[:120])
    return {k: tuple(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def generate(folder: Path, keep: Callable[[str], bool], python: str | None) -> Iterator[Generated]:
    """Each chosen torchvision model, exported in the child interpreter."""
    for name in CLASSIFIERS + SEGMENTERS + DETECTORS:
        if not keep(name):
            continue
        if not python:
            yield Generated(FAMILY, name, None, "skipped: no --torchvision-python given")
            continue
        out = folder / f"{name}.onnx"
        try:
            shapes = export_in_child(python, name, "plain", out)
        except Exception as exc:
            yield Generated(FAMILY, name, None, f"export failed: {first_line(exc)}")
            continue
        yield Generated(FAMILY, name, out, shapes=tuple(shapes.items()), detector=kind(name) == "detector")


def _child(name: str, variant: str, out: str) -> None:
    """The export itself (runs inside the torchvision interpreter)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    k = kind(name)
    extra: dict[str, object] = {"min_size": 320, "max_size": 320} if "rcnn" in name or "retinanet" in name else {}
    if k == "segmenter":
        extra = {"aux_loss": False}
    if k != "classifier":
        extra["weights_backbone"] = None
    model = torchvision.models.get_model(name, weights=None, **extra).eval()
    side = SIDE[k]
    image = torch.rand(1, 3, side, side, generator=torch.Generator().manual_seed(0))
    dynamic = None
    if k == "detector":
        module, args, names = model, ([image[0]],), ["image"]
    elif k == "segmenter":
        module, args, names = _First(model), (image,), ["image"]
    elif variant == "uint8-nhwc":
        module, names = _Uint8Nhwc(model), ["image"]
        args = ((image * 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous(),)
    else:
        module, args, names = model, (image,), ["image"]
        dynamic = {"image": {0: "batch"}, "logits": {0: "batch"}}
    if variant == "float64":
        module, args = module.double(), tuple(a.double() for a in args)
    with torch.no_grad():
        torch.onnx.export(module, args, out, input_names=names, output_names=None if k == "detector" else ["logits"],
                          dynamic_axes=dynamic, opset_version=17, dynamo=False)
    first = args[0][0] if k == "detector" else args[0]
    print(json.dumps({names[0]: list(first.shape)}))


def _wrappers() -> None:
    import torch

    global _First, _Uint8Nhwc

    class _First(torch.nn.Module):  # segmenters return {"out": ...}
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)["out"]

    class _Uint8Nhwc(torch.nn.Module):  # a camera frame: uint8 NHWC in, normalised inside
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255)
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model((x.permute(0, 3, 1, 2).float() - self.mean) / self.std)


if __name__ == "__main__":
    _wrappers()
    _child(*sys.argv[1:4])
