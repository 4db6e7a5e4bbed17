"""The TensorRT stubs generated from NVIDIA's bindings: the generator's fixes, and that mypy with
them tells 10.16 from 11.4 (the point of type-checking trtconv/trt against both)."""

from __future__ import annotations

import ast

import pytest
from scripts import ROOT, load_script

STUBS = ROOT / ".cache" / "trt-stubs"


def _generator():
    return load_script("tools/trt_stubs/generate.py", "trt_stub_generate")


def test_default_before_non_default_is_repaired():
    gen = _generator()
    line = ("    def add_scale_nd(self, input: ITensor, mode: ScaleMode, shift: Weights = ..., scale: Weights = ..., "
            "power: Weights = ..., channel_axis: typing.SupportsInt) -> IScaleLayer: ...")
    fixed, n = gen.fix_stub_syntax("class A:\n" + line + "\n")
    assert n == 1
    ast.parse(fixed)
    assert "channel_axis: typing.SupportsInt = ..." in fixed


def test_trt_bool_attribute_no_longer_shadows_builtin():
    gen = _generator()
    text = "import typing\nbool: DataType\nclass B:\n    def f(self, x: bool) -> bool: ...\n    y: list[bool]\n"
    fixed, n = gen.fix_builtin_shadowing(text)
    assert n == 2
    assert "bool: DataType" in fixed
    assert "def f(self, x: builtins.bool) -> builtins.bool" in fixed and "list[builtins.bool]" in fixed
    assert fixed.startswith("import builtins\n")


def test_leaked_module_variables_are_not_reexported():
    gen = _generator()
    init = "from tensorrt.tensorrt import Builder as Builder, value as value\n"
    fixed, n = gen.fix_reexports(init, "class Builder: ...\n")
    assert n == 1 and fixed.strip() == "from tensorrt.tensorrt import Builder as Builder"


PROBE = '''
def build() -> None:
    import tensorrt as trt

    builder = trt.Builder(trt.Logger())
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.FP16)
    config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
'''


@pytest.mark.parametrize("version, fp16_exists", [("10.16", True), ("11.4", False), ("rtx", False)])
def test_mypy_with_the_stubs_knows_which_version_has_fp16(version, fp16_exists, tmp_path, monkeypatch):
    if not (STUBS / version / "tensorrt" / "__init__.pyi").is_file():
        pytest.skip("TensorRT stubs not generated: run `make stubs`")
    from mypy import api

    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.setenv("MYPYPATH", str(STUBS / version))
    out, err, status = api.run(["--config-file", str(ROOT / "tools" / "trt_stubs" / "mypy.ini"),
                                "--cache-dir", str(ROOT / ".mypy_cache" / f"trt-{version}"), str(tmp_path / "probe.py")])
    fp16_errors = [line for line in out.splitlines() if "FP16" in line]
    if fp16_exists:
        assert status == 0, out + err
    else:
        assert status == 1 and len(fp16_errors) == 1, out + err
        assert 'has no attribute "FP16"' in fp16_errors[0]


def _enum_members(version: str, cls: str) -> set[str]:
    stub = STUBS / version / "tensorrt" / "tensorrt.pyi"
    if not stub.is_file():
        pytest.skip("TensorRT stubs not generated: run `make stubs`")
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    raise AssertionError(f"{cls} not in the {version} stubs")


@pytest.mark.parametrize("version", ["10.16", "11.4"])
def test_names_looked_up_at_run_time_exist_in_both_versions(version):
    """What trtconv reaches by name (getattr), which mypy cannot see, checked against each API."""
    from trtconv.plan.build_plan import MEMORY_POOLS

    assert {p.upper() for p in MEMORY_POOLS} <= _enum_members(version, "MemoryPoolType")
    flags = _enum_members(version, "NetworkDefinitionCreationFlag")
    assert {"STRONGLY_TYPED", "PREFER_AOT_PYTHON_PLUGINS"} <= flags
    assert {"NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"} <= _enum_members(version, "HardwareCompatibilityLevel")
    builder_flags = _enum_members(version, "BuilderFlag")
    assert {"VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME"} <= builder_flags
    # The differences trtconv/trt/compat.py exists for:
    assert ("FP16" in builder_flags) == (version == "10.16")
    assert ("EXPLICIT_BATCH" in flags) == (version == "10.16")


RTX_PROBE = '''
def build() -> None:
    import tensorrt as trt

    config = trt.Builder(trt.Logger()).create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM86, 0)
'''


@pytest.mark.parametrize("version, has_compute_capabilities", [("11.4", False), ("rtx", True)])
def test_mypy_with_the_stubs_knows_only_rtx_targets_compute_capabilities(version, has_compute_capabilities,
                                                                        tmp_path, monkeypatch):
    """The RTX stubs are a `tensorrt` package too: the same adapter code is checked against RTX's API."""
    if not (STUBS / version / "tensorrt" / "__init__.pyi").is_file():
        pytest.skip("TensorRT stubs not generated: run `make stubs`")
    from mypy import api

    (tmp_path / "probe_rtx.py").write_text(RTX_PROBE)
    monkeypatch.setenv("MYPYPATH", str(STUBS / version))
    out, err, status = api.run(["--config-file", str(ROOT / "tools" / "trt_stubs" / "mypy.ini"),
                                "--cache-dir", str(ROOT / ".mypy_cache" / f"trt-{version}"),
                                str(tmp_path / "probe_rtx.py")])
    if has_compute_capabilities:
        assert status == 0, out + err
    else:
        assert status == 1 and "ComputeCapability" in out and "set_compute_capability" in out, out + err


def test_rtx_names_looked_up_at_run_time_exist():
    """compat.set_compute_capabilities builds "SM86" from "8.6"; the pools and flags trtconv names exist."""
    from trtconv.plan.build_plan import MEMORY_POOLS, RTX_COMPUTE_CAPABILITIES

    members = _enum_members("rtx", "ComputeCapability")
    assert {"SM" + cc.replace(".", "") for cc in RTX_COMPUTE_CAPABILITIES} <= members
    assert "SM90" not in members  # Hopper is no RTX target: an engine built here does not run there
    assert {p.upper() for p in MEMORY_POOLS} <= _enum_members("rtx", "MemoryPoolType")
    flags = {m for m in _enum_members("rtx", "NetworkDefinitionCreationFlag") if not m.startswith("_")}
    assert flags == {"STRONGLY_TYPED"}  # no plugin flags
    assert "FP16" not in _enum_members("rtx", "BuilderFlag")
