"""A tiny BERT made of ONNX Runtime's fused transformer ops (EmbedLayerNormalization, Attention,
SkipLayerNormalization, BiasGelu, FastGelu) builds with one `trtconv build --trt rtx`: the real
TensorRT-RTX parser rejects every one of them as they are ("Plugin not found"; Attention is routed
to ONNX's importer), and the rules make them standard ONNX it parses and builds (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from fused_builders import I64, Case, In, const, tiny_bert

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

tensorrt_rtx = pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

ROPE_COS = const("cos", np.cos(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))
ROPE_SIN = const("sin", np.sin(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))
FUSED_RULES = {"ms-embed-layernorm", "ms-attention", "ms-skip-layernorm", "ms-bias-gelu", "ms-fast-gelu"}


def _rtx_parses(path: Path) -> bool:
    trt = tensorrt_rtx
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    return bool(trt.OnnxParser(network, logger).parse_from_file(str(path)))


def test_a_fused_bert_builds_on_rtx_with_every_rule_reported(tmp_path):
    model = tmp_path / "bert.onnx"
    onnx.save(tiny_bert(), model)
    assert not _rtx_parses(model)  # as exported by ONNX Runtime's optimizer: rejected
    engine = tmp_path / "bert.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(engine)])
    assert res.exit_code == 0, res.output
    assert engine.stat().st_size > 10_000
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    rewrites = manifest["rewrites"]
    assert {r["rule"] for r in rewrites} == FUSED_RULES
    assert len(rewrites) == 10  # every fused node, each with its proof against ONNX Runtime
    assert all(r["proof"]["passed"] and r["proof"]["method"] == "onnxruntime" for r in rewrites)
    assert all(r["proof"]["outputs"][0]["max_abs"] <= r["proof"]["tolerance"] for r in rewrites)
    prepared = tmp_path / "bert.prepared.onnx"
    assert not [n for n in onnx.load(str(prepared)).graph.node if n.domain == "com.microsoft"]
    assert _rtx_parses(prepared)


def test_skip_rule_keeps_the_fused_node_and_the_build_says_which(tmp_path):
    model = tmp_path / "bert.onnx"
    onnx.save(tiny_bert(layers=1), model)
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(tmp_path / "e.engine"),
                                   "--skip-rule", "ms-bias-gelu", "--prepare-only"])
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "l0_act (BiasGelu" in res.output


def _rotary(path: Path) -> Path:
    """com.microsoft::RotaryEmbedding alone: RTX parses and builds it as ONNX's RotaryEmbedding, whose
    inputs come in another order (tests/analyze/test_domain_blind.py measures that)."""
    model = Case("RotaryEmbedding", [In("x", (2, 2, 4, 8)), In("p", (2, 4), I64), ROPE_COS, ROPE_SIN]).model()
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnx.save(model, path)
    return path


def test_rotary_embedding_is_rewritten_by_default_and_never_built_as_onnx_rotary(tmp_path):
    model = _rotary(tmp_path / "rope.onnx")
    engine = tmp_path / "rope.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(engine)])
    assert res.exit_code == 0, res.output
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    assert [r["rule"] for r in manifest["rewrites"]] == ["ms-rotary-embedding"]
    skipped = tmp_path / "skipped.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(skipped),
                                   "--skip-rule", "ms-rotary-embedding"])
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "rotaryembedding0 (RotaryEmbedding: rewritable by ms-rotary-embedding, turned off by --skip-rule)" \
        in res.output and "Traceback" not in res.output
    assert not skipped.exists() and not Path(str(skipped) + ".json").exists()


def test_a_float16_fused_bert_builds_with_its_proofs_shaped(tmp_path):
    """ONNX Runtime's optimizer with ``--float16`` (its converter, inputs and outputs kept float32)
    writes a value info with a type and no shape for every retyped tensor; they hid every fused node's
    shape from the proofs ("the shape of input ... is unknown (give --shapes)", exit 7, although
    --shapes was given: issue 33)."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    fp16 = OnnxModel(tiny_bert(batch="batch", seq="seq", layers=1))
    fp16.convert_float_to_float16(keep_io_types=True)
    assert any(not vi.type.tensor_type.HasField("shape") for vi in fp16.model.graph.value_info)
    model = tmp_path / "bert16.onnx"
    onnx.save(fp16.model, model)
    engine = tmp_path / "bert16.engine"
    shapes = ",".join(f"{n}:1x8" for n in ("input_ids", "segment_ids", "mask"))
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(engine), "--shapes", shapes, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rewrites = doc["manifest_data"]["rewrites"]
    assert {r["rule"] for r in rewrites} == FUSED_RULES
    assert all(r["proof"]["passed"] for r in rewrites)
    # the graph proof runs at the build's shapes (it was skipped: "input 'input_ids' has dynamic dims")
    (proof,) = [s["graph_proof"] for s in doc["stages"] if s.get("graph_proof")]
    assert proof["method"] == "onnxruntime" and proof["passed"], proof


def test_an_unknown_proof_shape_says_give_shapes_only_when_none_were_given():
    from trtconv.rewrites import RewriteSettings
    from trtconv.rewrites.transformer.fused import _unknown_shape

    assert "give --shapes" in _unknown_shape("t", RewriteSettings())
    given = _unknown_shape("t", RewriteSettings(proof_shapes={"x": (1, 8)}))
    assert "give --shapes" not in given and "does not reach it" in given
