"""Triton model repositories, parsed with Triton's own schema (tritonclient's ``model_config_pb2``
through protobuf's text format) and checked against the ONNX.

Triton's TensorRT backend loads TensorRT 10/11 plans, not TensorRT-RTX ones: ``build --trt rtx
--triton-repo`` and ``triton-repo`` of RTX engines are refused before any work (issue 35). The
configs are written here from the bindings and profiles real builds recorded (one adapter writes
them for every flavour: TensorRT-RTX builds here, TensorRT 10/11 needs a GPU), through the
repository writer the CLI calls; the CLI's own TensorRT run is the ``trt`` test at the end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import mask_model
from click.testing import CliRunner
from onnx import helper
from realmodels import ddddocr_model, magika_model

from trtconv.api import PlanSource, write_repository
from trtconv.cli.main import cli
from trtconv.cli.triton_repo import plan_source
from trtconv.errors import ExitCode, UsageError

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
text_format = pytest.importorskip("google.protobuf.text_format")

NP_TO_TRITON = {np.float32: "TYPE_FP32", np.float16: "TYPE_FP16", np.int32: "TYPE_INT32", np.int64: "TYPE_INT64",
                np.int8: "TYPE_INT8", np.uint8: "TYPE_UINT8", np.bool_: "TYPE_BOOL"}
MAGIKA = ["--min-shapes", "bytes:1x2048", "--opt-shapes", "bytes:2x2048", "--max-shapes", "bytes:4x2048"]


@pytest.fixture(scope="module")
def model_config_pb2():
    """Triton's ModelConfig schema. Loaded from its file: ``tritonclient.grpc``'s package __init__
    imports grpcio, which the schema itself does not need (the test extra installs tritonclient alone)."""
    tc = pytest.importorskip("tritonclient", reason="tritonclient is in the test extra: run `make install`")
    path = Path(tc.__file__).parent / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.output


def _parse(pb2, path: Path):
    config = text_format.Parse(path.read_text(), pb2.ModelConfig())
    return config, {t.name: t for t in config.input}, {t.name: t for t in config.output}


def _onnx_io(model: Path) -> dict[str, tuple[str, list[int | str]]]:
    m = onnx.load(str(model), load_external_data=False)
    out = {}
    for v in [*m.graph.input, *m.graph.output]:
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).type
        out[v.name] = (NP_TO_TRITON[dtype], [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim])
    return out


def _check_against_onnx(pb2, config, tensors, model: Path, batched: bool) -> None:
    expected = _onnx_io(model)
    assert set(tensors) == set(expected)
    for name, t in tensors.items():
        triton_type, dims = expected[name]
        assert pb2.DataType.Name(t.data_type) == triton_type, name
        want = [d if isinstance(d, int) else -1 for d in (dims[1:] if batched else dims)]
        assert list(t.dims) == want, name


def _engine(tmp_path_factory, model: Path, name: str, *flags: str) -> Path:
    engine = tmp_path_factory.mktemp("engines") / f"{name}.engine"
    code, out = _run("build", model, "-o", engine, "--trt", "rtx", *flags)
    assert code == 0, out
    return engine


@pytest.fixture(scope="module")
def magika_engines(tmp_path_factory) -> list[Path]:
    """Magika (dynamic batch) built for two compute capabilities."""
    return [_engine(tmp_path_factory, magika_model(), f"magika-{cc}", *MAGIKA, "--compute-capability", cc)
            for cc in ("8.6", "8.9")]


def _as_served(engine: Path) -> PlanSource:
    """The engine's recorded bindings, profiles and compute capabilities, as a TensorRT 10/11 engine
    of the same network records them (the layout under test; the plan itself is not loaded)."""
    src = plan_source(engine)
    assert src.flavour == "TensorRT-RTX"
    return PlanSource(src.engine, src.bindings, src.profiles, src.compute_capabilities, flavour="TensorRT",
                      shape_inputs=src.shape_inputs)


def test_build_triton_repo_for_rtx_is_refused_before_any_work(tmp_path):
    model, engine, repo = ddddocr_model(), tmp_path / "det.engine", tmp_path / "repo"
    code, out = _run("build", model, "-o", engine, "--trt", "rtx", "--triton-repo", repo)
    assert code == ExitCode.USAGE, out
    assert "--triton-repo: Triton's TensorRT backend loads TensorRT 10/11 plans, not TensorRT-RTX ones" in out
    assert "trtconv: check" not in out and "stage" not in out  # no stage ran
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no engine, manifest, prepared ONNX or repository

    spec = tmp_path / "spec.toml"  # the spec key alike
    spec.write_text(f'trt = "rtx"\ntriton-repo = "{repo}"\n')
    code, out = _run("build", model, "-o", engine, "--config", spec)
    assert code == ExitCode.USAGE and "triton-repo in the spec file: Triton's TensorRT backend" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_triton_repo_of_rtx_engines_is_refused(magika_engines, tmp_path):
    repo = tmp_path / "repo"
    code, out = _run("triton-repo", *magika_engines, "-o", repo, "--name", "magika")
    assert code == ExitCode.USAGE and "not TensorRT-RTX ones" in out, out
    assert not repo.exists() or not any(repo.iterdir())
    with pytest.raises(UsageError, match="not TensorRT-RTX ones"):  # the writer itself refuses them too
        write_repository(repo, "magika", [plan_source(magika_engines[0])])


def test_config_for_a_dynamic_batch_model(model_config_pb2, magika_engines, tmp_path):
    model, engine, repo = magika_model(), magika_engines[0], tmp_path / "repo"
    write_repository(repo, "magika", [_as_served(engine)])
    config, inputs, outputs = _parse(model_config_pb2, repo / "magika" / "config.pbtxt")
    assert config.name == "magika" and config.platform == "tensorrt_plan"
    assert config.max_batch_size == 4  # the profile's largest batch
    _check_against_onnx(model_config_pb2, config, {**inputs, **outputs}, model, batched=True)
    assert list(inputs["bytes"].dims) == [2048]
    assert [list(g.profile) for g in config.instance_group] == [["0"]]
    assert (repo / "magika" / "1" / "model.plan").read_bytes() == engine.read_bytes()
    assert not config.cc_model_filenames


def test_config_for_a_model_without_a_batch_dimension(model_config_pb2, tmp_path_factory, tmp_path):
    model, repo = ddddocr_model(), tmp_path / "repo"
    write_repository(repo, "det", [_as_served(_engine(tmp_path_factory, model, "det"))])
    config, inputs, outputs = _parse(model_config_pb2, repo / "det" / "config.pbtxt")
    assert config.max_batch_size == 0
    _check_against_onnx(model_config_pb2, config, {**inputs, **outputs}, model, batched=False)
    assert list(inputs["images"].dims) == [1, 3, 416, 416]


def test_engines_for_several_compute_capabilities(model_config_pb2, magika_engines, tmp_path):
    model, repo = magika_model(), tmp_path / "repo"
    write_repository(repo, "magika", [_as_served(e) for e in magika_engines])
    config, inputs, outputs = _parse(model_config_pb2, repo / "magika" / "config.pbtxt")
    assert dict(config.cc_model_filenames) == {"8.6": "model_sm86.plan", "8.9": "model_sm89.plan"}
    assert config.default_model_filename in dict(config.cc_model_filenames).values()
    for engine, plan in zip(magika_engines, ("model_sm86.plan", "model_sm89.plan")):
        assert (repo / "magika" / "1" / plan).read_bytes() == engine.read_bytes()
    _check_against_onnx(model_config_pb2, config, {**inputs, **outputs}, model, batched=True)

    # the same compute capability twice cannot be told apart by Triton: refused, nothing written
    with pytest.raises(UsageError, match="covered by two engines"):
        write_repository(tmp_path / "repo2", "magika", [_as_served(magika_engines[0])] * 2)
    assert not (tmp_path / "repo2").exists()


def test_triton_repo_into_an_unwritable_place_is_refused_before_any_work(tmp_path):
    """A repository under a regular file can be made by no one (root included): one line, exit 10, nothing written."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    code, out = _run("build", magika_model(), "-o", tmp_path / "m.engine", "--trt", "10.16", *MAGIKA,
                     "--triton-repo", blocker / "repo")
    assert code == ExitCode.IO_ERROR, out
    assert f"--triton-repo {blocker / 'repo'}: {blocker} is a file, not a folder" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.trt
def test_build_triton_repo_for_tensorrt(model_config_pb2, tmp_path):
    """Where TensorRT and a GPU are: the CLI writes the repository beside the engine it built."""
    model, engine, repo = magika_model(), tmp_path / "magika.engine", tmp_path / "repo"
    code, out = _run("build", model, "-o", engine, *MAGIKA, "--triton-repo", repo)
    assert code == 0, out
    config, inputs, outputs = _parse(model_config_pb2, repo / "magika" / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 4
    _check_against_onnx(model_config_pb2, config, {**inputs, **outputs}, model, batched=True)
    assert (repo / "magika" / "1" / "model.plan").read_bytes() == engine.read_bytes()


def test_a_shape_tensor_input_is_marked_for_triton(model_config_pb2, tmp_path_factory, tmp_path):
    """Triton feeds an input TensorRT made a shape tensor as values for set_input_shape only when the
    config says ``is_shape_tensor``; without it the plan does not load."""
    model = mask_model(tmp_path / "mask.onnx")
    engine = _engine(tmp_path_factory, model, "mask", "--shapes", "mask:[1,1,1,0,0,0]")
    repo = tmp_path / "repo"
    write_repository(repo, "mask", [_as_served(engine)])
    config, inputs, _ = _parse(model_config_pb2, repo / "mask" / "config.pbtxt")
    assert inputs["mask"].is_shape_tensor and not inputs["x"].is_shape_tensor
