"""The Python API: docs/api.md's examples run here, on a real model with real(istic) images."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trtconv

DOC = Path(__file__).parents[1] / "docs" / "api.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_api_doc_examples_run(tmp_path: Path, ocr_cls: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    from realdata import ocr_line_images

    shutil.copyfile(ocr_cls, tmp_path / "model.onnx")
    ocr_line_images(tmp_path / "lines", range(4), flip_every=2)
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 6
    namespace: dict[str, object] = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as exc:  # say which block, with its text
            raise AssertionError(f"docs/api.md block {i + 1} failed: {exc!r}\n{block}") from exc
    out = capsys.readouterr().out
    assert "ACCURACY" in out and "cosine" in out
    assert (tmp_path / "model.fp16.onnx").is_file() and (tmp_path / "model.rewritten.onnx").is_file()


def test_import_is_light_and_lazy():
    code = (
        "import sys, trtconv\n"
        "heavy = sorted(m for m in ('onnx', 'onnxruntime', 'numpy', 'click', 'rich', 'tensorrt', 'trtconv.api')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
        "trtconv.check\n"
        "print('trtconv.api' in sys.modules, 'tensorrt' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "", f"`import trtconv` imported {out[0]}"
    assert out[1] == "True False"


@pytest.mark.parametrize("first", ["attribute", "submodule", "from-import"])
def test_rewrite_and_build_are_plain_functions_whatever_was_imported_first(first: str):
    """No subpackage is named like a pipeline function, so import order cannot change what they are."""
    setup = {
        "attribute": "import trtconv; trtconv.rewrite; trtconv.build",
        "submodule": "import trtconv.rewrites.catalog, trtconv.plan.build_plan; import trtconv",
        "from-import": "from trtconv import rewrite, build; import trtconv",
    }[first]
    code = (
        f"{setup}\n"
        "import inspect\n"
        "import trtconv.rewrites.catalog as catalog\n"
        "import trtconv.plan.build_plan\n"
        "from trtconv import rewrite\n"
        "assert inspect.isfunction(trtconv.rewrite) and inspect.isfunction(trtconv.build)\n"
        "assert rewrite is trtconv.rewrite and catalog.REWRITABLE\n"
        "assert trtconv.plan.build_plan.DEFAULT_OPT_LEVEL >= 0\n"
        "try:\n"
        "    trtconv.rewrite('missing.onnx')\n"
        "except trtconv.TrtconvError as exc:\n"
        "    print(exc.exit_code.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "USAGE"


def test_public_names_resolve_and_unknown_names_fail():
    for name in trtconv.__all__:
        assert getattr(trtconv, name) is not None, name
    assert trtconv.__version__ == "0.1.0"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        trtconv.nope  # noqa: B018


def test_build_settings_match_build_defaults():
    """BuildSettings takes its defaults from the declared settings; the plan made from them has the
    plan's own defaults; the build's own file names."""
    from dataclasses import fields

    from trtconv.plan import BuildPlan
    from trtconv.settings import declared

    settings = trtconv.BuildSettings()
    for f in fields(settings):
        want = declared(f.name).default
        assert getattr(settings, f.name) == (() if want is None and declared(f.name).multiple else want), f.name
    made = settings.plan("m.onnx", "out/m.engine", "11.4")
    plan = BuildPlan(onnx_path=Path("m.onnx"), engine_path=Path("out/m.engine"))
    for f in ("optimization_level", "hardware_compat", "min_precision_share", "version_compatible", "target",
              "precision", "timing_cache"):
        assert getattr(made, f) == getattr(plan, f), f
    assert settings.outputs("out/m.engine") == [
        Path("out/m.prepared.onnx"), Path("out/m.engine.json"), Path("out/m.engine")]
    assert trtconv.BuildSettings(prepare_only=True).outputs("m.engine") == [Path("m.prepared.onnx")]


def test_cli_build_calls_the_api_function_a_python_user_calls():
    """`trtconv build` goes through trtconv.api.build (one name: ``api.build``), not around it to the pipeline."""
    import ast

    source = (Path(trtconv.__file__).parent / "cli" / "build_command.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = {(node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert ("trtconv", "api") in imported
    calls = {f"{n.func.value.id}.{n.func.attr}" for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)}
    assert "api.build" in calls
    assert not any(module and module.startswith("trtconv.pipeline") for module, _ in imported)


def test_build_computes_each_thing_once(tmp_path):
    """INT8 over a DCN model whose rewrite targets a TensorRT plugin (ONNX Runtime runs neither the
    model nor the prepared graph): the model is read once (plus the prepared ONNX, once, as written),
    and the DeformConv form that calibration, the corner check and verify need is made once."""
    import numpy as np
    from builders import dcn_model

    from trtconv.load import load_model
    from trtconv.rewrites import rewrite

    model = dcn_model(tmp_path / "dcn.onnx")
    (tmp_path / "cal").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        np.save(tmp_path / "cal" / f"{i}.npy", rng.standard_normal((1, 8, 32, 32)).astype(np.float32))
    watched = {load_model.__code__: "load_model", rewrite.__code__: "rewrite"}
    calls: list[tuple[str, object]] = []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code in watched:
            first = frame.f_locals.get("path", frame.f_locals.get("settings"))
            calls.append((watched[frame.f_code], first))

    # six samples: too few for the gate's claim; what is computed once is the subject, so INT8 goes on unverified
    settings = trtconv.BuildSettings(precision="int8", calib_data=tmp_path / "cal", dcn_target="trt-plugin", trt="11.4",
                                     prepare_only=True, int8_unverified=True)
    sys.setprofile(profile)
    try:
        outcome = trtconv.build(model, tmp_path / "d.engine", settings)
    finally:
        sys.setprofile(None)
    stages = {s.name: s for s in outcome.stages}
    assert stages["precision"].detail["calibrated_on"] == "DeformConv form"
    assert stages["profiles"].detail["graph"] == "original with DCN as DeformConv"
    loads = [str(p) for name, p in calls if name == "load_model"]
    assert loads == [str(model), str(tmp_path / "d.prepared.onnx")], loads
    targets = [s.dcn_target for name, s in calls if name == "rewrite"]
    assert targets == ["trt-plugin", "deformconv"], targets  # the rewrite, then its DeformConv form once
