"""Which generated transformer models build for TensorRT-RTX as they are, and with `trtconv build --trt rtx`.

Issue 25 Deliver 3 (transformer part): models from ``transformers`` configs with seeded random
weights (small: hidden 64, 2 layers; nothing is downloaded), exported by ``torch.onnx.export``
(opset 17, static shapes), each also after ONNX Runtime's transformer optimizer
(``onnxruntime.transformers.optimizer``, which writes ``com.microsoft`` fused ops). Per model:
the bare TensorRT-RTX parser + builder as is (in a child process), beside
``trtconv build --trt rtx`` (a child process too), with the rules it applied and the worst
proof figure (max |err| / tolerance). Needs the ``bench`` extra (``pip install -e .[bench]``).

    python benchmarks/build_coverage.py [--out DIR] [--only bert,vit]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HIDDEN, LAYERS, HEADS, SEQ, IMAGE, VOCAB = 64, 2, 4, 16, 32, 1000


@dataclass(frozen=True)
class Spec:
    name: str
    ort_type: str  # onnxruntime.transformers.optimizer model_type
    make: Callable[[], Any]  # () -> (torch module, example inputs tuple, input names)


def _text(model: Any) -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (1, SEQ), generator=g)
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    return model, (ids, mask), ["input_ids", "attention_mask"]


def _image(model: Any, channels: int = 3, side: int = IMAGE) -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch

    return model, (torch.randn(1, channels, side, side, generator=torch.Generator().manual_seed(0)),), ["pixel_values"]


def specs() -> list[Spec]:
    import torch
    import transformers as tf

    def eager(cfg: Any) -> Any:  # the classic attention graph ONNX Runtime's fusions match (not SDPA)
        cfg._attn_implementation = "eager"
        return cfg

    small = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
             "intermediate_size": 4 * HIDDEN}
    # ONNX Runtime fuses EmbedLayerNormalization only where the vocabulary outnumbers the positions
    text = {"vocab_size": VOCAB, "max_position_embeddings": 64}

    class Encoder(torch.nn.Module):  # Whisper's encoder alone: features -> hidden states
        def __init__(self, enc: Any) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, x: Any) -> Any:
            return self.enc(input_features=x).last_hidden_state

    def whisper() -> tuple[Any, tuple[Any, ...], list[str]]:
        cfg = tf.WhisperConfig(d_model=HIDDEN, encoder_layers=LAYERS, encoder_attention_heads=HEADS,
                               decoder_layers=1, decoder_attention_heads=HEADS, encoder_ffn_dim=4 * HIDDEN,
                               decoder_ffn_dim=4 * HIDDEN, num_mel_bins=16, max_source_positions=32)
        enc = Encoder(tf.WhisperModel(eager(cfg)).get_encoder())
        return enc, (torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(0)),), ["input_features"]

    def build(model_cls: Any, cfg: Any) -> Any:
        return model_cls(eager(cfg))

    return [
        Spec("bert", "bert", lambda: _text(build(tf.BertModel, tf.BertConfig(**text, **small)))),
        Spec("roberta", "bert", lambda: _text(build(tf.RobertaModel, tf.RobertaConfig(**text, **small)))),
        Spec("distilbert", "bert", lambda: _text(build(tf.DistilBertModel, tf.DistilBertConfig(
            **text, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=4 * HIDDEN)))),
        Spec("vit", "vit", lambda: _image(build(tf.ViTModel, tf.ViTConfig(image_size=IMAGE, patch_size=8, **small)))),
        Spec("clip-vision", "clip", lambda: _image(build(tf.CLIPVisionModel, tf.CLIPVisionConfig(
            image_size=IMAGE, patch_size=8, **small)))),
        Spec("swin", "swin", lambda: _image(build(tf.SwinModel, tf.SwinConfig(
            image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4)))),
        Spec("whisper-encoder", "bart", whisper),
        Spec("t5-encoder", "t5", lambda: _text(build(tf.T5EncoderModel, tf.T5Config(
            vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=4 * HIDDEN, num_layers=LAYERS,
            num_heads=HEADS)))),
        Spec("gpt2", "gpt2", lambda: _text(build(tf.GPT2Model, tf.GPT2Config(
            vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64, use_cache=False)))),
    ]


def export(spec: Spec, folder: Path) -> Path:
    import torch

    class ByName(torch.nn.Module):  # positional tensors -> the model's keyword inputs -> its first output
        def __init__(self, model: Any, names: list[str]) -> None:
            super().__init__()
            self.model, self.names = model, names

        def forward(self, *xs: Any) -> Any:
            out = self.model(**dict(zip(self.names, xs)))
            return out if isinstance(out, torch.Tensor) else out[0]

    torch.manual_seed(0)
    model, inputs, names = spec.make()
    model.eval()
    path = folder / f"{spec.name}.onnx"
    with torch.no_grad():
        torch.onnx.export(ByName(model, names) if spec.name != "whisper-encoder" else model, inputs, str(path),
                          input_names=names, output_names=["hidden"], opset_version=17, dynamo=False)
    return path


def optimize(spec: Spec, path: Path) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model

    out = path.with_name(path.stem + ".ort-opt.onnx")
    opt = optimize_model(str(path), model_type=spec.ort_type, num_heads=HEADS if spec.name != "swin" else 0,
                         hidden_size=HIDDEN if spec.name != "swin" else 0, opt_level=0, use_gpu=False)
    opt.save_model_to_file(str(out))
    return out


def fused_ops(path: Path) -> str:
    import onnx

    ops = sorted({n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node
                  if n.domain == "com.microsoft" or n.op_type in ("SimplifiedLayerNormalization",)})
    return ", ".join(ops) or "-"


def bare_rtx(path: Path) -> str:
    from trtconv.trt.realparse import run_isolated

    v = run_isolated(path, "tensorrt_rtx", build=True, timeout=600)
    if not v["parsed"]:
        first = v["parser_errors"][0] if v["parser_errors"] else {"op_type": "?", "desc": "?"}
        return f"parse fails: {first['op_type']}: {first['desc'][:70]}"
    return "builds" if v["built"] else f"build fails: {(v['build_errors'] or ['?'])[0][:70]}"


def trtconv_rtx(path: Path, folder: Path) -> tuple[str, str, str]:
    """(verdict, rules applied, worst proof figure) of ``trtconv build --trt rtx``."""
    engine = folder / (path.stem + ".engine")
    cmd = [sys.executable, "-m", "trtconv", "build", "--trt", "rtx", str(path), "-o", str(engine), "--json", "--force"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1][:80] if proc.stderr else ''}", "-", "-"
    rewrites = (doc.get("manifest_data") or {}).get("rewrites") or []
    counts: dict[str, int] = {}
    for r in rewrites:
        counts[r["rule"]] = counts.get(r["rule"], 0) + 1
    rules = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "-"
    ratios = [max((o["max_abs"] for o in r["proof"]["outputs"]), default=0.0) / r["proof"]["tolerance"]
              for r in rewrites if r["proof"].get("tolerance")]
    worst = f"{max(ratios):.3f}" if ratios else "-"
    err = doc.get("error")
    verdict = "builds" if err is None else f"exit {err['exit_code']}: {err['message'][:80]}"
    return verdict, rules, worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where models and engines go (default: a temp dir)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import tensorrt_rtx

    folder = args.out or Path(tempfile.mkdtemp(prefix="build_coverage_"))
    folder.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in specs() if not args.only or s.name in args.only.split(",")]
    print(f"TensorRT-RTX {tensorrt_rtx.__version__}; hidden {HIDDEN}, {LAYERS} layers, {HEADS} heads, "
          f"seq {SEQ}, image {IMAGE}; seeded random weights; opset 17")
    head = ("model", "variant", "fused ops", "RTX as is", "trtconv build --trt rtx", "rules applied",
            "worst proof (err/tol)", "s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for spec in chosen:
        try:
            raw = export(spec, folder)
        except Exception as exc:
            print(f"| {spec.name} | export | - | export failed: {str(exc).splitlines()[0][:80]} | | | | |")
            continue
        variants = [("torch.onnx.export", raw)]
        try:
            variants.append(("+ ORT optimizer", optimize(spec, raw)))
        except Exception as exc:
            print(f"| {spec.name} | ORT optimizer | - | failed: {str(exc).splitlines()[0][:80]} | | | | |")
        for label, path in variants:
            t0 = time.perf_counter()
            bare = bare_rtx(path)
            verdict, rules, worst = trtconv_rtx(path, folder)
            cells = (spec.name, label, fused_ops(path), bare, verdict, rules, worst, f"{time.perf_counter() - t0:.0f}")
            print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
