"""Plain torch models for benchmarks/build_coverage.py: what users write themselves, seeded random weights.

No model library: recurrent nets (a bidirectional two-layer GRU tagger), 3-D convolution (a video
classifier), einsum (attention and a bilinear head written with ``torch.einsum``), timm-style
classifiers written out in torch (a ConvNeXt stage: depthwise 7x7, channels-last LayerNorm, layer
scale; a ViT block on ``F.scaled_dot_product_attention``, as timm's attention calls it), and a model
whose length input's value cuts a tensor (a shape-tensor input). ``torch.onnx.export`` (opset 17).
Needs only ``torch``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coverage_models import Generated, first_line

FAMILY = "torch"
# shape-tensor inputs' values, as a user gives them (trtexec's habit; trtconv: --shapes length:[7])
VALUES: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {"length-cut": (("length", (7,)),)}


def _models() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str], dict[str, dict[int, str]]]]]:
    import torch
    import torch.nn.functional as fn
    from torch import nn

    g = torch.Generator().manual_seed(0)

    class GruTagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(500, 32)
            self.gru = nn.GRU(32, 48, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(96, 9)

        def forward(self, ids: Any) -> Any:
            return self.out(self.gru(self.emb(ids))[0])

    class Video3d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv3d(3, 16, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3)), nn.BatchNorm3d(16), nn.ReLU(),
                nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)), nn.Conv3d(16, 32, 3, padding=1, groups=4),
                nn.BatchNorm3d(32), nn.ReLU(), nn.AdaptiveAvgPool3d(1))
            self.head = nn.Linear(32, 10)

        def forward(self, clip: Any) -> Any:
            return self.head(self.body(clip).flatten(1))

    class EinsumNet(nn.Module):
        def __init__(self, d: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.heads, self.qkv = heads, nn.Linear(d, 3 * d)
            self.bilinear = nn.Parameter(torch.randn(d, d, 5, generator=g) * 0.05)

        def forward(self, x: Any) -> Any:
            b, n, d = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
            att = torch.einsum("bihd,bjhd->bhij", q, k).softmax(-1)
            y = torch.einsum("bhij,bjhd->bihd", att, v).reshape(b, n, d)
            return torch.einsum("bnd,bne,def->bf", y, x, self.bilinear)

    class ConvNextStage(nn.Module):
        def __init__(self, c: int = 48) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, c, 4, stride=4)
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))
            self.gamma = nn.Parameter(torch.full((c,), 1e-6 * 1e5))
            self.head = nn.Linear(c, 10)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            y = self.dw(x).permute(0, 2, 3, 1)
            x = x + (self.gamma * self.mlp(self.norm(y))).permute(0, 3, 1, 2)
            return self.head(x.mean((2, 3)))

    class VitSdpa(nn.Module):
        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.patch = nn.Conv2d(3, d, 8, stride=8)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(torch.randn(1, 17, d, generator=g) * 0.02)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, 10)

        def forward(self, img: Any) -> Any:
            x = self.patch(img).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            b, n, d = x.shape
            q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = fn.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
            x = x + self.proj(a)
            x = x + self.mlp(self.n2(x))
            return self.head(x[:, 0])

    class LengthCut(nn.Module):
        """Pools the first ``length`` frames: the length's value sets a shape (TensorRT: a shape tensor)."""

        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, frames: Any, length: Any) -> Any:
            return self.proj(frames[:, : length[0]]).mean(1)

    ids = torch.randint(0, 500, (2, 12), generator=g)
    return {
        "gru-tagger": lambda: (GruTagger(), (ids,), ["ids"], {}),
        "conv3d-video": lambda: (Video3d(), (torch.randn(1, 3, 8, 32, 32, generator=g),), ["clip"], {}),
        "einsum-attention": lambda: (EinsumNet(), (torch.randn(2, 10, 32, generator=g),), ["x"], {}),
        "convnext-stage": lambda: (ConvNextStage(), (torch.randn(1, 3, 64, 64, generator=g),), ["image"],
                                   {"image": {0: "batch"}}),
        "vit-sdpa": lambda: (VitSdpa(), (torch.randn(1, 3, 32, 32, generator=g),), ["image"], {"image": {0: "batch"}}),
        "length-cut": lambda: (LengthCut(), (torch.randn(1, 20, 16, generator=g), torch.tensor([7])),
                               ["frames", "length"], {}),
    }


def generate(folder: Path, keep: Callable[[str], bool]) -> Iterator[Generated]:
    try:
        import torch

        torch.manual_seed(0)
        models = _models()
    except Exception as exc:
        yield Generated(FAMILY, "torch", None, f"skipped: {first_line(exc)}")
        return
    for name, make in models.items():
        if not keep(name):
            continue
        try:
            model, inputs, names, axes = make()
            path = folder / f"{name}.onnx"
            with torch.no_grad():
                torch.onnx.export(model.eval(), inputs, str(path), input_names=names, dynamic_axes=axes or None,
                                  opset_version=17, dynamo=False)
            values = VALUES.get(name, ())
            yield Generated(FAMILY, name, path, shapes=tuple((n, tuple(x.shape)) for n, x in zip(names, inputs)),
                            values=values)
        except Exception as exc:
            yield Generated(FAMILY, name, None, f"export failed: {first_line(exc)}")
