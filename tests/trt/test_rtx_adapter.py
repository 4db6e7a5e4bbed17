"""trtconv.trt's adapter driven directly against the real TensorRT-RTX (no GPU needed).

What the CLI tests cannot reach because an earlier stage stops first: the real builder's
own rejection of Silero VAD, the parser's per-node errors, and the network precision check
on a graph whose precision stage never ran.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from realmodels import rapidocr_model, silero_model

from trtconv.errors import BuildError, ExitCode, PrecisionNotAchievedError
from trtconv.plan.build_plan import BuildPlan
from trtconv.plan.profiles import build_profiles
from trtconv.trt.builder import build_engine
from trtconv.trt.flavour import RTX, TENSORRT, current, for_target

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


def _plan(model: Path, engine: Path, shapes: str | None = None, **kw) -> BuildPlan:
    profiles = build_profiles(onnx.load(str(model), load_external_data=False), shapes=shapes) if shapes else ()
    return BuildPlan(onnx_path=model, engine_path=engine, target="rtx", profiles=profiles, **kw)


def test_silero_lstm_in_if_is_rejected_by_the_real_builder_in_one_message(tmp_path):
    engine = tmp_path / "vad.engine"
    with pytest.raises(BuildError) as err:
        build_engine(_plan(silero_model(), engine, "input:1x512,state:2x1x128"), timing_cache=None)
    assert err.value.exit_code == ExitCode.BUILD_FAILED
    msg = err.value.message
    assert msg.startswith("TensorRT-RTX's builder failed: ") and len(msg) > len("TensorRT-RTX's builder failed: ") + 20
    assert "Error Code" in msg and "\n" not in msg  # TensorRT's own words, on one line
    assert "it fails once node If_0 (If) joins the graph" in msg  # its words name none: prefix builds did
    assert not engine.exists()


def _deformconv_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w")]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["feat"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w_off"], ["offset"], name="offset_conv", pads=[1, 1, 1, 1]),
        helper.make_node("DeformConv", ["feat", "w", "offset"], ["y"], name="deform0", pads=[1, 1, 1, 1]),
    ]
    inits.append(numpy_helper.from_array(rng.standard_normal((18, 4, 3, 3)).astype(np.float32) * 0.1, "w_off"))
    g = helper.make_graph(nodes, "dc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), path)
    return path


def test_parser_rejection_names_the_node_and_says_rtx_has_no_plugins(tmp_path):
    """ONNX DeformConv is imported as a plugin, which TensorRT-RTX does not have."""
    engine = tmp_path / "dc.engine"
    with pytest.raises(BuildError) as err:
        build_engine(_plan(_deformconv_model(tmp_path / "dc.onnx"), engine), timing_cache=None)
    assert err.value.message.startswith("TensorRT-RTX's ONNX parser rejected dc.onnx: node deform0 (DeformConv): ")
    assert "Plugin not found" in err.value.message or "plugin" in err.value.message.lower()
    assert "no plugins" in (err.value.hint or "")
    assert not engine.exists()


def test_fp16_asked_of_an_fp32_network_fails_the_network_check_before_building(tmp_path):
    """The precision check reads the strongly typed network: an FP32 graph asked to be fp16 is refused
    (exit 8) and no engine is written, though the builder would have built it in FP32."""
    engine = tmp_path / "det.engine"
    with pytest.raises(PrecisionNotAchievedError) as err:
        build_engine(_plan(rapidocr_model("det"), engine, "x:1x3x64x64", precision="fp16"), timing_cache=None)
    assert err.value.exit_code == ExitCode.PRECISION_NOT_ACHIEVED
    assert "asked for fp16, but only 0%" in err.value.message and "fp32" in err.value.message
    assert not engine.exists()


def test_the_plan_target_picks_the_flavour_for_the_build_only(tmp_path):
    engine = tmp_path / "det.engine"
    result = build_engine(_plan(rapidocr_model("det"), engine, "x:1x3x64x64"), timing_cache=tmp_path / "t.cache")
    assert result.flavour == "TensorRT-RTX" and result.precision_source == "network"
    assert result.timing_cache is None and not (tmp_path / "t.cache").exists()  # never touched on RTX
    assert engine.stat().st_size == result.engine_bytes > 0
    assert current() == TENSORRT  # the context was restored
    assert for_target("rtx") == RTX and for_target("10.16") == for_target("11.4") == TENSORRT


def test_without_tensorrt_rtx_build_stops_after_the_prepared_onnx_with_its_install_hint(monkeypatch, tmp_path):
    import sys

    from click.testing import CliRunner

    from trtconv.cli.main import cli
    from trtconv.trt.loader import forget

    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    forget()
    try:
        engine = tmp_path / "det.engine"
        res = CliRunner().invoke(cli, ["build", str(rapidocr_model("det")), "--trt", "rtx", "-o", str(engine),
                                       "--shapes", "x:1x3x64x64"])
    finally:
        forget()
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    assert "TensorRT-RTX is not available" in res.output and "trtconv[rtx]" in res.output
    assert list(tmp_path.iterdir()) == []  # a failed build leaves nothing (--keep-prepared would keep it)
