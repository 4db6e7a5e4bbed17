"""BuildPlan, sizes, memory pools and optimization-profile validation against real models."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from trtconv.errors import UsageError
from trtconv.plan.build_plan import (
    BuildPlan,
    TimingCacheChoice,
    parse_memory_pools,
    parse_size,
    timing_cache_path,
    validate_plan,
)
from trtconv.plan.profiles import build_profiles


@pytest.fixture(scope="module")
def det_model(request) -> onnx.ModelProto:
    return onnx.load(str(request.getfixturevalue("ocr_det")), load_external_data=False)


@pytest.fixture(scope="module")
def cls_model(request) -> onnx.ModelProto:
    return onnx.load(str(request.getfixturevalue("ocr_cls")), load_external_data=False)


def test_parse_size_binary_units():
    assert parse_size("4G") == 4 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("48K") == 48 << 10
    assert parse_size("1048576") == 1 << 20
    with pytest.raises(UsageError):
        parse_size("four gigs")


def test_memory_pools_sorted_and_validated():
    assert parse_memory_pools(["workspace:2G", "tactic_shared_memory=48K"]) == (
        ("tactic_shared_memory", 48 << 10), ("workspace", 2 << 30))
    with pytest.raises(UsageError, match="unknown memory pool 'vram'"):
        parse_memory_pools(["vram:1G"])
    with pytest.raises(UsageError, match="given twice"):
        parse_memory_pools(["workspace:1G,workspace:2G"])


def test_timing_cache_is_per_gpu_and_version(tmp_path: Path):
    a = timing_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "9.0", "11.4.0.106")
    b = timing_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "9.0", "10.16.1.11")
    c = timing_cache_path(tmp_path, "NVIDIA L4", "8.9", "11.4.0.106")
    assert len({a, b, c}) == 3
    assert a.name == "nvidia-h100-80gb-hbm3-sm90-trt11.4.0.106.cache"
    assert TimingCacheChoice(enabled=False, cache_dir=tmp_path).resolve("g", "9.0", "11.4") is None
    explicit = tmp_path / "mine.cache"
    assert TimingCacheChoice(path=explicit, cache_dir=tmp_path).resolve("g", "9.0", "11.4") == explicit


def test_validate_plan_rejects_contradictions(tmp_path: Path):
    base = BuildPlan(onnx_path=tmp_path / "m.onnx", engine_path=tmp_path / "m.engine")
    validate_plan(base)
    with pytest.raises(UsageError, match="exclude-lean-runtime"):
        validate_plan(BuildPlan(tmp_path / "m.onnx", tmp_path / "m.engine", exclude_lean_runtime=True))
    with pytest.raises(UsageError, match="plugin library"):
        validate_plan(BuildPlan(tmp_path / "m.onnx", tmp_path / "m.engine", plugin_libraries=(tmp_path / "x.so",)))
    with pytest.raises(UsageError, match="optimization level"):
        validate_plan(BuildPlan(tmp_path / "m.onnx", tmp_path / "m.engine", optimization_level=7))


def test_plan_json_is_plain_data(tmp_path: Path):
    d = BuildPlan(tmp_path / "m.onnx", tmp_path / "m.engine", memory_pools=(("workspace", 1 << 30),)).to_json()
    assert d["memory_pools"] == {"workspace": 1 << 30}
    assert d["timing_cache"] == {"enabled": True, "path": None}


def test_static_shapes_make_one_fixed_profile(cls_model):
    (p,) = build_profiles(cls_model, shapes="x:1x3x48x192")
    assert p.to_json() == {"x": {"min": [1, 3, 48, 192], "opt": [1, 3, 48, 192], "max": [1, 3, 48, 192]}}


def test_several_profiles_from_repeated_flags(det_model):
    profiles = build_profiles(det_model, min_shapes=["x:1x3x32x32", "x:4x3x320x320"],
                              opt_shapes=["x:1x3x320x320", "x:4x3x640x640"],
                              max_shapes=["x:1x3x640x640", "x:8x3x960x960"])
    assert len(profiles) == 2
    assert profiles[1].corner("max") == {"x": (8, 3, 960, 960)}


@pytest.mark.parametrize("kwargs, message", [
    ({}, "dynamic inputs .* no shapes"),
    ({"shapes": "x:1x3x64x64", "opt_shapes": ["x:1x3x64x64"]}, "either --shapes or"),
    ({"min_shapes": ["x:1x3x64x64"], "opt_shapes": ["x:1x3x64x64"]}, "got 1 --min-shapes, 1 --opt-shapes, 0 --max-shapes"),
    ({"shapes": "images:1x3x64x64"}, "'images', which is not an input"),
    ({"shapes": "x:1x3x64"}, "rank 4"),
    ({"shapes": "x:1x4x64x64"}, "dim 1 is fixed at 3"),
    ({"shapes": "x:0x3x64x64"}, "zero dim"),
    ({"min_shapes": ["x:1x3x64x64"], "opt_shapes": ["x:1x3x32x64"], "max_shapes": ["x:1x3x96x96"]},
     "dim 2: min 64, opt 32, max 96"),
])
def test_bad_profiles_name_the_problem(det_model, kwargs, message):
    with pytest.raises(UsageError, match=message):
        build_profiles(det_model, **kwargs)


def test_fully_static_model_needs_no_profile():
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])])
    assert build_profiles(helper.make_model(g)) == ()


@pytest.mark.parametrize("shapes, fix", [("x:[1,2]", "--shapes x:1x4"), ("x:[1,2],s:[2,2]", "--shapes 'x:1x4,s:[2,2]'")])
def test_values_for_a_data_input_are_refused_with_its_shape_offered(shapes, fix):
    """`--shapes 'x:[1,2]'` on a float input was taken as values for a shape tensor: "input 'x' holds 192 value(s);
    2 were given", with a hint of 192 ones, or "no shape for dynamic input x" with x:[1,2] in the hint again. It is
    a data input: said, with the command whose --shapes gives its shape (the shape-tensor input's values kept)."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UsageError, match="'x' values .* float32 data input") as err:
        build_profiles(model, shapes=shapes, command="trtconv build m.onnx -o m.engine")
    assert err.value.hint == f"trtconv build m.onnx -o m.engine {fix}"
    [profile] = build_profiles(model, shapes=fix.split(" ", 1)[1].strip("'"))  # the hint's shapes build a profile
    assert dict(profile.inputs)["x"].opt == (1, 4)
