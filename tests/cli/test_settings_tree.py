"""One settings tree (issue 24): `build --help`, the spec-file keys and `trtconv.BuildSettings`
(and `quantize --help`, its spec keys and `trtconv.QuantizeSettings`) agree name for name with the declarations in trtconv/settings; contradictions are usage errors;
old spellings warn; without --trt the target is the TensorRT that is installed (issue 26)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import click
import onnx
import pytest
from click.testing import CliRunner

import trtconv
from trtconv import api
from trtconv.cli.config import spec_keys
from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.settings import SETTINGS, for_command

CLS_SHAPES = "x:1x3x48x192"
# click parameters of `build` that steer the run, not the build: files, output format, spec, caches
NOT_SETTINGS = frozenset({"model", "output", "force", "as_json", "config", "print_config", "deps", "cache_dir",
                          "no_cache", "quiet", "verbose", "layers", "triton_repo", "report"})


def run(*args: object) -> click.testing.Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def build_command(name: str = "build") -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None
    return cmd


def disagreements(command: click.Command, api: type, name: str = "build") -> list[str]:
    """Every way the command's flags, its spec keys and the API's fields differ from the declarations."""
    declared = {s.name for s in for_command(name)}
    problems = []
    params = {p.name for p in command.params if p.name and p.name not in NOT_SETTINGS}
    params = {p for p in params if not p.endswith("_deprecated")}
    problems += [f"--help has {p!r}, not declared" for p in sorted(params - declared)]
    problems += [f"declared {p!r}, not in --help" for p in sorted(declared - params)]
    for p in command.params:
        if p.name in declared and isinstance(p, click.Option):
            flag = "--" + p.name.replace("_", "-")
            if flag not in p.opts:
                problems.append(f"{p.name!r} is spelled {p.opts[0]} on the command line")
    keys = {k for k, p in spec_keys(command).items() if p.name not in NOT_SETTINGS}
    want_keys = {n.replace("_", "-") for n in declared}
    problems += [f"spec key {k!r} is no declared setting" for k in sorted(keys - want_keys)]
    problems += [f"declared {k!r} has no spec key" for k in sorted(want_keys - keys)]
    fields = {f.name for f in dataclasses.fields(api)}
    problems += [f"API field {f!r} is no declared setting" for f in sorted(fields - declared)]
    problems += [f"declared {f!r} is no API field" for f in sorted(declared - fields)]
    return problems


def test_build_help_spec_keys_and_api_agree_name_for_name():
    assert disagreements(build_command(), trtconv.BuildSettings) == []
    help_text = run("build", "--help").output
    for s in for_command("build"):
        assert s.flag in help_text, s.flag
    for s in SETTINGS:  # one default: the API's field default is the declared one
        if "build" in s.commands:
            got = next(f for f in dataclasses.fields(trtconv.BuildSettings) if f.name == s.name).default
            assert got == s.default or (s.multiple and s.default is None), s.name


def test_a_planted_mismatch_is_found():
    renamed = dataclasses.make_dataclass("Renamed", [
        ("calib_limit" if f.name == "max_samples" else f.name, f.type, dataclasses.field(default=f.default))
        for f in dataclasses.fields(trtconv.BuildSettings)])
    found = disagreements(build_command(), renamed)
    assert "API field 'calib_limit' is no declared setting" in found
    assert "declared 'max_samples' is no API field" in found
    cmd = build_command()
    planted = click.Command("build", params=[
        click.Option(["--memory-pool", "memory_pools"], multiple=True) if p.name == "memory_pool" else p
        for p in cmd.params])
    found = disagreements(planted, trtconv.BuildSettings)
    assert "--help has 'memory_pools', not declared" in found and "declared 'memory_pool', not in --help" in found


# QuantizeSettings' defaults that differ from the declared ones, and why
QUANTIZE_OWN_DEFAULTS = {
    "precision": "fp16",  # quantize has no fp32 (the CLI requires --precision; the API defaults to fp16)
    "shapes": dataclasses.MISSING,  # parsed: a dict (default_factory), the declaration's None is "none given"
}


def test_quantize_help_spec_keys_and_api_agree_name_for_name():
    assert disagreements(build_command("quantize"), trtconv.QuantizeSettings, "quantize") == []
    help_text = run("quantize", "--help").output
    for s in for_command("quantize"):
        assert s.flag in help_text, s.flag
    for s in for_command("quantize"):  # one default, except where QuantizeSettings says why not
        got = next(f for f in dataclasses.fields(trtconv.QuantizeSettings) if f.name == s.name).default
        want = QUANTIZE_OWN_DEFAULTS.get(s.name, s.default)
        assert got == want or (s.multiple and s.default is None and got == ()), s.name
    # the same setting has the same name in both APIs: every quantize field is a BuildSettings field
    assert {f.name for f in dataclasses.fields(trtconv.QuantizeSettings)} <= {
        f.name for f in dataclasses.fields(trtconv.BuildSettings)}


def test_a_planted_quantize_mismatch_is_found():
    """The names QuantizeSettings had before (fold_batchnorm, use_calib_cache, thresholds) are caught."""
    old = {"no_fold_batchnorm": "fold_batchnorm", "no_calib_cache": "use_calib_cache", "max_abs": "thresholds"}
    renamed = dataclasses.make_dataclass("Renamed", [
        (old.get(f.name, f.name), f.type, dataclasses.field(default=f.default))
        for f in dataclasses.fields(trtconv.QuantizeSettings) if f.name != "shapes"])
    found = disagreements(build_command("quantize"), renamed, "quantize")
    for was, now in old.items():
        assert f"API field {now!r} is no declared setting" in found and f"declared {was!r} is no API field" in found
    assert "declared 'shapes' is no API field" in found
    planted = click.Command("quantize", params=[
        click.Option(["--calib-limit", "calib_limit"]) if p.name == "max_samples" else p
        for p in build_command("quantize").params])
    found = disagreements(planted, trtconv.QuantizeSettings, "quantize")
    assert "--help has 'calib_limit', not declared" in found and "declared 'max_samples', not in --help" in found
    assert "spec key 'calib-limit' is no declared setting" in found


def test_quantize_flags_and_api_fields_give_the_same_settings(ocr_cls, tmp_path: Path):
    """The CLI's parameters become QuantizeSettings field for field; the API's gate is built from the flat fields."""
    from trtconv.api import quantize_settings

    params = {"calib_data": tmp_path, "no_fold_batchnorm": True, "no_calib_cache": True, "max_abs": ("0.5",),
              "min_cosine": ("0.9", "out=0.95"), "gate_output": ("out",), "allow_nonfinite": True,
              "exclude_op": ("Softmax",), "max_samples": 3, "held_out": "2", "shapes": CLS_SHAPES}
    from_cli = quantize_settings("int8", params)
    api_side = trtconv.QuantizeSettings(
        precision="int8", calib_data=tmp_path, no_fold_batchnorm=True, no_calib_cache=True, max_abs=("0.5",),
        min_cosine=("0.9", "out=0.95"), gate_output=("out",), allow_nonfinite=True, exclude_op=("Softmax",),
        max_samples=3, held_out=2, shapes={"x": (1, 3, 48, 192)})
    assert from_cli == api_side
    gate = api_side.gate()
    assert gate.max_abs == 0.5 and gate.min_cosine == 0.9 and gate.allow_nonfinite and gate.only == ("out",)
    assert dict(gate.per_output)["out"].min_cosine == 0.95
    assert trtconv.QuantizeSettings(precision="int8").gate().min_cosine == 0.99  # none given: the defaults
    built = trtconv.BuildSettings(precision="int8", calib_data=tmp_path, no_fold_batchnorm=True, no_calib_cache=True,
                                  max_abs=("0.5",), min_cosine=("0.9", "out=0.95"), gate_output=("out",),
                                  allow_nonfinite=True, exclude_op=("Softmax",), max_samples=3, held_out="2",
                                  shapes=CLS_SHAPES).quantize_settings()
    assert built == api_side
    with pytest.raises(trtconv.TrtconvError, match="--min-cosine 'high'"):
        trtconv.quantize(ocr_cls, tmp_path / "q.onnx", trtconv.QuantizeSettings(min_cosine=("high",)))
    assert not (tmp_path / "q.onnx").exists()


def test_trtexec_alias_is_the_same_setting(ocr_cls, tmp_path: Path):
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only",
              "--calib-limit", "3", "--builder-optimization-level", "4", "--print-config", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["settings"]["max-samples"] == 3 and doc["settings"]["opt-level"] == 4
    assert doc["sources"]["max-samples"] == "command line"


@pytest.mark.parametrize("flags, named", [
    (("--calib-method", "minmax"), "--calib-method"),
    (("--max-abs", "0.1"), "--max-abs"),
    (("--no-fold-batchnorm",), "--no-fold-batchnorm"),
    (("--timing-cache", "t.cache", "--no-timing-cache"), "--timing-cache and --no-timing-cache"),
])
def test_contradictory_settings_are_a_usage_error(ocr_cls, tmp_path: Path, flags, named):
    """fp32 has no precision pass: its settings would be dropped silently; exit 2, one line naming them."""
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only", *flags)
    assert res.exit_code == ExitCode.USAGE, res.output
    errors = [line for line in res.stderr.splitlines() if line.startswith("trtconv: error:")]
    assert len(errors) == 1 and named in errors[0], res.stderr
    assert not (tmp_path / "m.prepared.onnx").exists()
    with pytest.raises(trtconv.TrtconvError, match="applies to --precision fp16 or int8"):
        trtconv.build(ocr_cls, tmp_path / "m.engine", trtconv.BuildSettings(calib_method="minmax",
                                                                              prepare_only=True))


def test_verify_old_threshold_spellings_warn_once_and_still_count(ocr_cls, tmp_path: Path, monkeypatch):
    from trtconv.api import gate_thresholds
    from trtconv.cli.options import merge_deprecated

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"not an engine")
    res = run("verify", engine, "--onnx", ocr_cls, "--atol", "0.5", "--rtol", "0.1")
    warnings = [line for line in res.stderr.splitlines() if "deprecated" in line]
    assert warnings == ["trtconv: warning: --atol is deprecated: use --max-abs (the old spelling goes in the next "
                        "release)", "trtconv: warning: --rtol is deprecated: use --max-rel (the old spelling goes in "
                        "the next release)"], res.stderr
    options = [line.split()[0] for line in run("verify", "--help").output.splitlines() if line.startswith("  --")]
    assert "--atol" not in options and "--max-abs" in options  # hidden, still accepted
    merged = merge_deprecated({"max_abs": (), "max_abs_deprecated": ("0.5",), "max_rel": ("0.2",),
                               "max_rel_deprecated": ()})
    t = gate_thresholds("fp32", merged)
    assert t.max_abs == 0.5 and t.max_rel == 0.2


def _expected_default() -> str:
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here: the default is its version")
    if importlib.util.find_spec("tensorrt_rtx") is None:
        pytest.skip("TensorRT-RTX is not installed here")
    return "rtx"


def test_without_trt_the_installed_tensorrt_is_the_target_said_in_one_line(ocr_cls, tmp_path: Path):
    assert _expected_default() == trtconv.api.default_target()[0]
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if line.startswith("trtconv: target:")]
    assert said == [], "--json: stderr keeps only warnings and errors"
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only")
    said = [line for line in res.stderr.splitlines() if line.startswith("trtconv: target:")]
    assert said == ["trtconv: target: TensorRT-RTX (TensorRT-RTX is installed and TensorRT 10/11 is not importable; "
                    "--trt picks another)"], res.stderr
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only", "--trt", "11.4")
    assert "trtconv: target:" not in res.stderr  # an explicit --trt wins, silently
    res = run("check", ocr_cls)
    assert "trtconv: target: TensorRT-RTX" in res.stderr and "TensorRT-RTX" in res.stdout


def test_exit_9_hint_does_not_ask_to_install_what_is_installed(ocr_cls, tmp_path: Path, monkeypatch):
    from trtconv.trt.loader import forget

    _expected_default()
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    forget()
    try:
        res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--trt", "11.4")
    finally:
        forget()
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    hint = next(line for line in res.stderr.splitlines() if line.startswith("  hint:"))
    assert "trtconv[rtx]" not in hint and "--trt rtx --shapes" in hint, hint


def _nodes(path: Path) -> int:
    return len(onnx.load(str(path)).graph.node)


def _gelu_after_constants(path: Path) -> Path:
    """x + (a * b) -> com.microsoft::Gelu: a rule's site, and a Mul of two constants that folding removes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    a = numpy_helper.from_array(np.full((1, 4, 8), 0.5, np.float32), "a")
    b = numpy_helper.from_array(np.full((1, 4, 8), 2.0, np.float32), "b")
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"], name="mul0"),
             helper.make_node("Add", ["x", "ab"], ["s"], name="add0"),
             helper.make_node("Gelu", ["s"], ["y"], name="gelu0", domain="com.microsoft")]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], initializer=[a, b])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=9), path)
    return path


def test_build_takes_every_rewrite_switch_and_fp16_option(ocr_cls, tmp_path: Path):
    """`--no-fold` (rewrite's switch, named in the proof-failure hint) and `--fp16-io` reach the prepared ONNX."""
    # folding is a clean-up of a rewrite that runs: a model with nothing to rewrite is handed on untouched, so the
    # switch is seen on one with a rule's site (com.microsoft::Gelu) and a constant chain to fold
    folding = _gelu_after_constants(tmp_path / "gelu.onnx")
    rewrite = ["build", folding, "--prepare-only", "--trt", "11.4"]
    assert run(*rewrite, "-o", tmp_path / "a.engine").exit_code == 0
    res = run(*rewrite, "-o", tmp_path / "b.engine", "--no-fold", "--no-int32", "--fold-limit", "1M", "--tolerance",
              "1e-4")
    assert res.exit_code == 0, res.output
    assert _nodes(tmp_path / "b.prepared.onnx") > _nodes(tmp_path / "a.prepared.onnx")  # constants not folded
    base = ["build", ocr_cls, "--shapes", CLS_SHAPES, "--prepare-only", "--trt", "11.4"]
    res = run(*base, "-o", tmp_path / "h.engine", "--precision", "fp16", "--fp16-io")
    assert res.exit_code == 0, res.output
    x = onnx.load(str(tmp_path / "h.prepared.onnx")).graph.input[0]
    assert x.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    spec = tmp_path / "b.toml"
    spec.write_text("fold = false\nkeep-io-types = false\n")
    res = run(*base, "-o", tmp_path / "s.engine", "--config", spec, "--print-config", "--json")
    doc = json.loads(res.stdout)
    assert doc["settings"]["fold"] is False and doc["sources"]["fold"].startswith("spec file")
    assert doc["settings"]["keep-io-types"] is False


@pytest.mark.parametrize("name", ["verify", "bench"])
def test_verify_and_bench_trt_is_the_declared_setting_defaulting_to_the_engine(name):
    """Main's verify/bench --trt (issue 26) is the declared `trt` setting: same name and choices, and
    no default (the runtime then comes from the engine's manifest or header)."""
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None
    (param,) = [p for p in cmd.params if "--trt" in getattr(p, "opts", ())]
    declared = next(s for s in SETTINGS if s.name == "trt")
    assert name in declared.commands and param.name == "trt" and param.default is None
    assert tuple(param.type.choices) == declared.choices  # type: ignore[attr-defined]


def test_keep_prepared_and_no_preflight_are_settings_but_not_engine_identity(ocr_cls, tmp_path: Path):
    """They change what a failed build leaves and a pre-build check, never the engine's bytes."""
    out = tmp_path / "m.engine"
    base = trtconv.BuildSettings(shapes=CLS_SHAPES, trt="rtx")
    same = dataclasses.replace(base, keep_prepared=True, no_preflight=True)
    assert api.engine_identity_hash(ocr_cls, out, base) == api.engine_identity_hash(ocr_cls, out, same)
    assert api.engine_identity_hash(ocr_cls, out, base) != api.engine_identity_hash(
        ocr_cls, out, dataclasses.replace(base, int32=False))


def test_skip_rule_calib_method_and_quantize_share_are_declared_settings(ocr_cls, tmp_path: Path):
    """integ's options (#25 --skip-rule, #27 --calib-method mse/auto and quantize --min-precision-share) come
    from the tree: one name on rewrite's and build's command line, in a spec file and in BuildSettings."""
    from trtconv.settings import declared

    assert {"rewrite", "build"} <= set(declared("skip_rule").commands)
    assert {"quantize", "build"} <= set(declared("min_precision_share").commands)
    assert {"mse", "auto"} <= set(declared("calib_method").choices)
    assert trtconv.BuildSettings(skip_rule=("ms-gelu",)).rewrite_settings("rtx").skip_rules == {"ms-gelu"}
    share = trtconv.BuildSettings(precision="int8", min_precision_share=0.8).quantize_settings()
    assert share.min_precision_share == 0.8
    res = run("rewrite", ocr_cls, "-o", tmp_path / "r.onnx", "--skip-rule", "no-such-rule")
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "ms-gelu" in res.output  # the refusal lists the rules
    (tmp_path / "spec.toml").write_text('skip-rule = ["no-such-rule"]\n')
    res = run("rewrite", ocr_cls, "-o", tmp_path / "r.onnx", "--config", tmp_path / "spec.toml")
    assert res.exit_code == ExitCode.USAGE, res.output
