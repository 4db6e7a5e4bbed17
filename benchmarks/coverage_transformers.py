"""Transformer models for benchmarks/build_coverage.py: ``transformers`` configs with seeded random weights.

Small (hidden 64, 2 layers, 4 heads; nothing is downloaded), exported by ``torch.onnx.export``
(opset 17, static shapes, eager attention), and where ONNX Runtime has a fusion type for the
architecture also after ``onnxruntime.transformers.optimizer`` (``<name>+ort``), which writes
``com.microsoft`` fused ops; BERT, ViT and GPT-2 also converted to float16 after it as its ``--float16``
does (``<name>+ort-fp16``). Needs the ``bench`` extra (``transformers``, ``torch``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coverage_models import Generated, first_line

HIDDEN, LAYERS, HEADS, SEQ, IMAGE, VOCAB = 64, 2, 4, 16, 32, 1000
FAMILY = "transformers"


@dataclass(frozen=True)
class Spec:
    name: str
    ort_type: str | None  # onnxruntime.transformers.optimizer model_type; None: no optimized variant
    make: Callable[[], Any]  # () -> (torch module, example inputs tuple, input names)


def _text(model: Any) -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (1, SEQ), generator=g)
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    return model, (ids, mask), ["input_ids", "attention_mask"]


def _image(model: Any, side: int = IMAGE) -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch

    return model, (torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0)),), ["pixel_values"]


def _eager(cfg: Any) -> Any:
    """The classic attention graph ONNX Runtime's fusions match (not SDPA)."""
    cfg._attn_implementation = "eager"
    return cfg


def _whisper() -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch
    import transformers as tf

    cfg = tf.WhisperConfig(d_model=HIDDEN, encoder_layers=LAYERS, encoder_attention_heads=HEADS,
                           decoder_layers=1, decoder_attention_heads=HEADS, encoder_ffn_dim=4 * HIDDEN,
                           decoder_ffn_dim=4 * HIDDEN, num_mel_bins=16, max_source_positions=32)
    enc = tf.WhisperModel(_eager(cfg)).get_encoder()
    return enc, (torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(0)),), ["input_features"]


def _wav2vec2() -> tuple[Any, tuple[Any, ...], list[str]]:
    import torch
    import transformers as tf

    cfg = tf.Wav2Vec2Config(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=4 * HIDDEN, conv_dim=(32, 32), conv_stride=(5, 2),
                            conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    audio = torch.randn(1, 1600, generator=torch.Generator().manual_seed(0))
    return tf.Wav2Vec2Model(_eager(cfg)), (audio,), ["input_values"]


def _detr() -> tuple[Any, tuple[Any, ...], list[str]]:
    import transformers as tf

    backbone = tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                               out_features=["stage2"])
    cfg = tf.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
                        d_model=HIDDEN, encoder_layers=1, decoder_layers=1, encoder_attention_heads=HEADS,
                        decoder_attention_heads=HEADS, encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN,
                        num_queries=10)
    return _image(tf.DetrModel(_eager(cfg)), side=64)


def specs() -> list[Spec]:
    import transformers as tf

    small = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
             "intermediate_size": 4 * HIDDEN}
    # ONNX Runtime fuses EmbedLayerNormalization only where the vocabulary outnumbers the positions
    text = {"vocab_size": VOCAB, "max_position_embeddings": 64}

    def build(model_cls: Any, cfg: Any) -> Any:
        return model_cls(_eager(cfg))

    return [
        Spec("bert", "bert", lambda: _text(build(tf.BertModel, tf.BertConfig(**text, **small)))),
        Spec("roberta", "bert", lambda: _text(build(tf.RobertaModel, tf.RobertaConfig(**text, **small)))),
        Spec("distilbert", "bert", lambda: _text(build(tf.DistilBertModel, tf.DistilBertConfig(
            **text, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=4 * HIDDEN)))),
        Spec("vit", "vit", lambda: _image(build(tf.ViTModel, tf.ViTConfig(image_size=IMAGE, patch_size=8, **small)))),
        Spec("deit", "vit", lambda: _image(build(tf.DeiTModel, tf.DeiTConfig(image_size=IMAGE, patch_size=8, **small)))),
        Spec("yolos", "vit", lambda: _image(build(tf.YolosModel, tf.YolosConfig(
            image_size=[IMAGE, IMAGE], patch_size=8, num_detection_tokens=5, **small)))),
        Spec("clip-vision", "clip", lambda: _image(build(tf.CLIPVisionModel, tf.CLIPVisionConfig(
            image_size=IMAGE, patch_size=8, **small)))),
        Spec("swin", "swin", lambda: _image(build(tf.SwinModel, tf.SwinConfig(
            image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4)))),
        Spec("convnext", None, lambda: _image(build(tf.ConvNextModel, tf.ConvNextConfig(
            num_stages=2, image_size=IMAGE, hidden_sizes=[16, 32], depths=[1, 1])))),
        Spec("segformer", None, lambda: _image(build(tf.SegformerModel, tf.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
            strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32)))),
        Spec("whisper-encoder", "bart", _whisper),
        Spec("wav2vec2", None, _wav2vec2),
        Spec("detr", None, _detr),
        Spec("t5-encoder", "t5", lambda: _text(build(tf.T5EncoderModel, tf.T5Config(
            vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=4 * HIDDEN, num_layers=LAYERS,
            num_heads=HEADS)))),
        Spec("gpt2", "gpt2", lambda: _text(build(tf.GPT2Model, tf.GPT2Config(
            vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64, use_cache=False)))),
    ]


def export(spec: Spec, folder: Path, *, double: bool = False) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """The spec's model as ONNX (float64 weights and inputs with ``double``), and its example shapes."""
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
    if double:
        model = model.double()
        inputs = tuple(x.double() if x.is_floating_point() else x for x in inputs)
    path = folder / f"{spec.name}{'-float64' if double else ''}.onnx"
    with torch.no_grad():
        torch.onnx.export(ByName(model, names), inputs, str(path), input_names=names, output_names=["hidden"],
                          opset_version=17, dynamo=False)
    return path, {n: tuple(x.shape) for n, x in zip(names, inputs)}


# after the optimizer, also converted to float16 as its ``--float16`` does (inputs and outputs kept float32)
FP16 = ("bert", "vit", "gpt2")


def optimize(spec: Spec, path: Path, fp16: bool = False) -> Path:
    from onnxruntime.transformers.optimizer import optimize_model

    out = path.with_name(path.stem + ("+ort-fp16.onnx" if fp16 else "+ort.onnx"))
    plain = spec.name == "swin"  # Swin's attention is windowed: the optimizer reads heads/hidden itself
    opt = optimize_model(str(path), model_type=spec.ort_type or "bert", num_heads=0 if plain else HEADS,
                         hidden_size=0 if plain else HIDDEN, opt_level=0, use_gpu=False)
    if fp16:
        opt.convert_float_to_float16(keep_io_types=True)
    opt.save_model_to_file(str(out))
    return out


def generate(folder: Path, keep: Callable[[str], bool]) -> Iterator[Generated]:
    """Each chosen spec as exported, then after ONNX Runtime's optimizer where it has a type for it."""
    for spec in specs():
        wants_opt = spec.ort_type is not None and keep(spec.name + "+ort")
        wants_fp16 = spec.name in FP16 and spec.ort_type is not None and keep(spec.name + "+ort-fp16")
        if not keep(spec.name) and not wants_opt and not wants_fp16:
            continue
        try:
            raw, shapes = export(spec, folder)
        except Exception as exc:  # a generator that fails is a row, not the end of the run
            yield Generated(FAMILY, spec.name, None, f"export failed: {first_line(exc)}")
            continue
        if keep(spec.name):
            yield Generated(FAMILY, spec.name, raw, shapes=tuple(shapes.items()))
        if wants_opt:
            try:
                yield Generated(FAMILY, spec.name + "+ort", optimize(spec, raw), shapes=tuple(shapes.items()))
            except Exception as exc:
                yield Generated(FAMILY, spec.name + "+ort", None, f"ORT optimizer failed: {first_line(exc)}")
        if spec.name in FP16 and spec.ort_type is not None and keep(spec.name + "+ort-fp16"):
            try:
                yield Generated(FAMILY, spec.name + "+ort-fp16", optimize(spec, raw, fp16=True),
                                shapes=tuple(shapes.items()))
            except Exception as exc:
                yield Generated(FAMILY, spec.name + "+ort-fp16", None, f"ORT optimizer failed: {first_line(exc)}")
