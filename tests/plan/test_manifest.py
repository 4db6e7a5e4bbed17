"""The engine manifest: complete, deterministic apart from documented fields, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtconv.errors import DataError, UsageError
from trtconv.plan.build_plan import BuildPlan, InputRange, Profile
from trtconv.plan.manifest import (
    VOLATILE_FIELDS,
    build_manifest,
    manifest_path,
    read_manifest,
    runtime_mismatches,
    update_manifest,
    write_manifest,
)

ENV = {"tensorrt": "11.4.0.106", "cuda_runtime": "13.0", "cuda_driver": "13.0", "driver": "580.65.06",
       "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}


def _plan(tmp_path: Path) -> BuildPlan:
    prof = Profile((("x", InputRange((1, 3, 32, 32), (1, 3, 320, 320), (2, 3, 640, 640))),))
    return BuildPlan(tmp_path / "m.prepared.onnx", tmp_path / "m.engine", precision="fp16", profiles=(prof,),
                     memory_pools=(("workspace", 1 << 30),))


def _manifest(tmp_path: Path, **over) -> dict:
    kw = dict(onnx_sha256="ab" * 32, environment=ENV, source_onnx="m.onnx", rewrites=[{"rule": "dcnv2-mmcv", "node": "dcn1"}],
              precision={"method": "fp16-explicit"}, calibration=None, plugins_needed=["DCNv2/1/trtconv"],
              build_seconds=12.3456, created_at="2026-11-21T07:00:00+00:00", engine_sha256="cd" * 32)
    kw.update(over)
    return build_manifest(_plan(tmp_path), **kw)


def test_manifest_records_what_the_issue_lists(tmp_path: Path):
    m = _manifest(tmp_path)
    assert m["environment"] == {**ENV, "tensorrt_flavour": "TensorRT", "gpu_properties": None}
    assert m["build"]["target"] == "11.4" and m["build"]["compute_capabilities"] is None
    assert m["source"] == {"onnx": "m.onnx", "onnx_sha256": "ab" * 32, "prepared_onnx": "m.prepared.onnx"}
    assert m["rewrites"][0]["rule"] == "dcnv2-mmcv"
    assert m["precision"]["requested"] == "fp16"
    assert m["profiles"] == [{"x": {"min": [1, 3, 32, 32], "opt": [1, 3, 320, 320], "max": [2, 3, 640, 640]}}]
    assert m["plugins"]["needed_at_runtime"] == ["DCNv2/1/trtconv"]
    assert m["build"]["seconds"] == 12.346 and m["build"]["memory_pools"] == {"workspace": 1 << 30}
    for key in ("trtconv", "calibration", "verify", "bench", "created_at"):
        assert key in m


def test_only_volatile_fields_differ_between_identical_builds(tmp_path: Path):
    a = _manifest(tmp_path, created_at="2026-11-21T07:00:00+00:00", build_seconds=10.0)
    b = _manifest(tmp_path, created_at="2026-11-22T08:00:00+00:00", build_seconds=11.0)
    diff = {k for k in a if a[k] != b[k]} | {f"build.{k}" for k in a["build"] if a["build"][k] != b["build"][k]}
    assert diff == {"created_at", "build", "build.seconds"}
    assert {"created_at", "build.seconds"} <= set(VOLATILE_FIELDS)


def test_write_is_atomic_and_respects_force(tmp_path: Path):
    path = manifest_path(tmp_path / "m.engine")
    assert path.name == "m.engine.json"
    write_manifest(path, _manifest(tmp_path))
    first = path.read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        write_manifest(path, _manifest(tmp_path))
    write_manifest(path, _manifest(tmp_path), force=True)
    assert path.read_bytes() == first  # same inputs, same bytes (sorted keys)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trtconv-tmp-")]


def test_update_adds_results(tmp_path: Path):
    path = manifest_path(tmp_path / "m.engine")
    write_manifest(path, _manifest(tmp_path))
    update_manifest(path, bench={"median_ms": 1.5})
    assert json.loads(path.read_text())["bench"] == {"median_ms": 1.5}


def test_foreign_json_is_not_a_manifest(tmp_path: Path):
    bad = tmp_path / "x.engine.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(DataError, match="not a trtconv manifest"):
        read_manifest(bad)


@pytest.mark.parametrize("build, here, problem", [
    ({}, ("11.4.0.106", "9.0"), None),
    ({}, ("10.16.1.11", "9.0"), "same version unless built with --version-compatible"),
    ({"version_compatible": True}, ("11.5.0.1", "9.0"), None),
    ({"version_compatible": True}, ("11.3.0.1", "9.0"), "that version or later"),
    ({}, ("11.4.0.106", "8.9"), "compute capability 9.0, this GPU has 8.9"),
    ({"hardware_compat": "same-cc"}, ("11.4.0.106", "8.6"), "compute capability 9.0"),
    ({"hardware_compat": "ampere+"}, ("11.4.0.106", "8.6"), None),
    ({"hardware_compat": "ampere+"}, ("11.4.0.106", "7.5"), "Ampere and newer"),
])
def test_engine_portability_from_the_manifest(tmp_path: Path, build, here, problem):
    from trtconv.plan.manifest import runtime_mismatches

    m = _manifest(tmp_path)
    m["build"].update(build)
    found = runtime_mismatches(m, *here)
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0]


def test_rtx_manifest_records_its_targets_and_no_timing_cache(tmp_path: Path):
    plan = BuildPlan(tmp_path / "m.prepared.onnx", tmp_path / "m.engine", target="rtx",
                     compute_capabilities=("8.6", "8.9"))
    env = {**ENV, "tensorrt": "1.7.1.116", "tensorrt_flavour": "TensorRT-RTX", "gpu": None, "compute_capability": None}
    m = build_manifest(plan, onnx_sha256="ab" * 32, environment=env)
    assert m["environment"]["tensorrt_flavour"] == "TensorRT-RTX"
    assert m["build"]["target"] == "rtx" and m["build"]["compute_capabilities"] == ["8.6", "8.9"]
    assert m["build"]["timing_cache"] is False  # enabled by default, but RTX never touches one
    default = build_manifest(BuildPlan(tmp_path / "a.onnx", tmp_path / "a.engine", target="rtx"),
                             onnx_sha256="ab" * 32, environment=env)
    assert default["build"]["compute_capabilities"] == ["8.0", "8.6", "8.9", "12.0", "12.1"]
    # An RTX engine on a GPU outside its targets (the H100: 9.0) is refused in words before TensorRT is asked.
    problems = runtime_mismatches(m, "1.7.1.116", "9.0")
    assert len(problems) == 1 and "8.6 8.9" in problems[0] and "9.0" in problems[0]
    assert runtime_mismatches(m, "1.7.1.116", "8.6") == []
