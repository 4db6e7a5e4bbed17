"""Decoder LMs with a KV cache for benchmarks/build_coverage.py: ``transformers`` configs, seeded random weights.

What text-generation users export today: one decoding step of a causal LM, the past keys and values
as inputs and the present ones as outputs (optimum's layout: ``past_key_values.N.key`` ...), batch,
new tokens and past length dynamic. Small (hidden 64, 2 layers, 4 heads; grouped-query attention
where the architecture has it), eager attention, ``torch.onnx.export`` (opset 17). Needs the
``bench`` extra (``transformers``, ``torch``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coverage_models import Generated, first_line

FAMILY = "decoders"
HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, PAST, NEW = 64, 2, 4, 2, 1000, 8, 1


def _configs() -> dict[str, Callable[[], Any]]:
    import transformers as tf

    common = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 4 * HIDDEN,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "max_position_embeddings": 64}

    def eager(cfg: Any) -> Any:
        cfg._attn_implementation = "eager"
        return cfg

    return {
        "llama-kv": lambda: tf.LlamaForCausalLM(eager(tf.LlamaConfig(**common, num_key_value_heads=KV_HEADS))),
        "qwen2-kv": lambda: tf.Qwen2ForCausalLM(eager(tf.Qwen2Config(**common, num_key_value_heads=KV_HEADS))),
        "gpt2-kv": lambda: tf.GPT2LMHeadModel(eager(tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS,
                                                                   n_head=HEADS, n_positions=64))),
    }


def export(name: str, make: Callable[[], Any], folder: Path) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """One decoding step of ``make()`` with its cache as inputs and outputs; the example shapes."""
    import torch
    from transformers import DynamicCache

    class Step(torch.nn.Module):  # flat tensors in and out: the cache object is rebuilt inside
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any, mask: Any, *past: Any) -> Any:
            cache = DynamicCache()
            for i in range(0, len(past), 2):
                cache.update(past[i], past[i + 1], i // 2)
            out = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    torch.manual_seed(0)
    model = make().eval()
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, NEW), generator=g)
    mask = torch.ones(1, PAST + NEW, dtype=torch.int64)
    past = [torch.randn(1, kv_heads, PAST, head_dim, generator=g) for _ in range(2 * LAYERS)]
    kinds = ("key", "value")
    past_names = [f"past_key_values.{i // 2}.{kinds[i % 2]}" for i in range(2 * LAYERS)]
    names = ["input_ids", "attention_mask", *past_names]
    outs = ["logits", *(f"present.{i // 2}.{kinds[i % 2]}" for i in range(2 * LAYERS))]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "new"}, "attention_mask": {0: "batch", 1: "total"},
                                       "logits": {0: "batch", 1: "new"}}
    axes.update({n: {0: "batch", 2: "past"} for n in past_names})
    axes.update({n: {0: "batch", 2: "total"} for n in outs[1:]})
    path = folder / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(Step(model), (ids, mask, *past), str(path), input_names=names, output_names=outs,
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    return path, {"input_ids": tuple(ids.shape), "attention_mask": tuple(mask.shape),
                  **{n: tuple(t.shape) for n, t in zip(past_names, past)}}


def generate(folder: Path, keep: Callable[[str], bool]) -> Iterator[Generated]:
    try:
        configs = _configs()
    except Exception as exc:  # no transformers: one row says so
        yield Generated(FAMILY, "decoders", None, f"skipped: {first_line(exc)}")
        return
    for name, make in configs.items():
        if not keep(name):
            continue
        try:
            path, shapes = export(name, make, folder)
            yield Generated(FAMILY, name, path, shapes=tuple(shapes.items()))
        except Exception as exc:
            yield Generated(FAMILY, name, None, f"export failed: {first_line(exc)}")
