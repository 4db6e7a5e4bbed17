"""The generated models of benchmarks/overhead.py: seeded random weights, nothing downloaded.

- ``bert6``: a 6-layer BERT encoder from a ``transformers`` config (MiniLM-L6's shape: hidden 384,
  12 heads, BERT's 30522-token vocabulary: about 90 MB), exported by ``torch.onnx.export`` (opset 17, eager attention, dynamic batch and
  sequence).
- ``u2net``: a U²-Net-shaped salient-object segmenter (the published full-size channel plan: six
  encoder stages of nested residual U-blocks RSU-7 … RSU-4F, five decoder stages, six side outputs
  fused; about 44 M parameters, 176 MB in FP32), written here in plain torch, exported at 1×3×1024×1024.

Needs the ``bench`` extra (torch; transformers for ``bert6``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPSET = 17


def _rsu(torch: Any, depth: int, cin: int, mid: int, cout: int, dilated: bool) -> Any:
    """One residual U-block: an input conv, a ``depth``-level U of convs (pooling down, bilinear up;
    RSU-4F dilates instead of resizing), added to its input conv."""
    nn, F = torch.nn, torch.nn.functional

    def cbr(i: int, o: int, d: int = 1) -> Any:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=d, dilation=d), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class RSU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = cbr(cin, cout)
            dil = [2 ** i for i in range(depth)] if dilated else [1] * depth
            self.enc = nn.ModuleList([cbr(cout, mid, dil[0])] + [cbr(mid, mid, dil[i]) for i in range(1, depth - 1)])
            self.bottom = cbr(mid, mid, 2 * dil[depth - 2] if dilated else 2)
            self.dec = nn.ModuleList([cbr(2 * mid, mid, dil[i]) for i in range(depth - 2, 0, -1)] + [cbr(2 * mid, cout, 1)])

        def forward(self, x: Any) -> Any:
            hx = self.inp(x)
            skips, h = [], hx
            for i, layer in enumerate(self.enc):
                h = layer(h)
                skips.append(h)
                if not dilated and i < len(self.enc) - 1:
                    h = F.max_pool2d(h, 2, 2, ceil_mode=True)
            h = self.bottom(h)
            for layer, skip in zip(self.dec, reversed(skips)):
                if not dilated and h.shape[-2:] != skip.shape[-2:]:
                    h = F.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
                h = layer(torch.cat([h, skip], 1))
            return h + hx

    return RSU()


def u2net(torch: Any) -> Any:
    """U²-Net's full-size plan (Qin et al. 2020, table 1): encoder RSU-7/6/5/4/4F/4F, decoder mirrored."""
    nn, F = torch.nn, torch.nn.functional
    enc_plan = [(7, 3, 32, 64, False), (6, 64, 32, 128, False), (5, 128, 64, 256, False),
                (4, 256, 128, 512, False), (4, 512, 256, 512, True), (4, 512, 256, 512, True)]
    dec_plan = [(4, 1024, 256, 512, True), (4, 1024, 128, 256, False), (5, 512, 64, 128, False),
                (6, 256, 32, 64, False), (7, 128, 16, 64, False)]

    class U2Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.ModuleList([_rsu(torch, *p) for p in enc_plan])
            self.dec = nn.ModuleList([_rsu(torch, *p) for p in dec_plan])
            self.side = nn.ModuleList([nn.Conv2d(c, 1, 3, padding=1) for c in (64, 64, 128, 256, 512, 512)])
            self.fuse = nn.Conv2d(6, 1, 1)

        def forward(self, x: Any) -> Any:
            feats, h = [], x
            for i, stage in enumerate(self.enc):
                h = stage(h)
                feats.append(h)
                if i < len(self.enc) - 1:
                    h = F.max_pool2d(h, 2, 2, ceil_mode=True)
            outs = [h]
            for stage, skip in zip(self.dec, reversed(feats[:-1])):
                h = F.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
                h = stage(torch.cat([h, skip], 1))
                outs.append(h)
            size = x.shape[-2:]
            sides = [F.interpolate(conv(o), size=size, mode="bilinear", align_corners=False)
                     for conv, o in zip(self.side, reversed(outs))]
            return torch.sigmoid(self.fuse(torch.cat(sides, 1)))

    return U2Net()


def make_u2net(path: Path, side: int = 1024) -> Path:
    import torch

    torch.manual_seed(0)
    model = u2net(torch).eval()
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, 3, side, side),), str(path), input_names=["image"],
                          output_names=["mask"], opset_version=OPSET, dynamo=False)
    return path


def make_bert6(path: Path, seq: int = 128) -> Path:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512)  # MiniLM-L6's shape
    cfg._attn_implementation = "eager"  # the classic attention graph, as older exports have it
    bert = tf.BertModel(cfg, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):  # positional (ids, mask) -> the last hidden state
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    model = Encoder().eval()
    ids = torch.randint(0, 30522, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    dyn = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=OPSET, dynamo=False,
                          dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "last_hidden_state": dyn})
    return path
