"""Rewrite rules are objects: the registry holds them, ``check`` and ``rewrite`` ask the same
registry, and the driver applies any rule (match, emit, reference, proof inputs) without
knowing what it rewrites."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from trtconv.errors import AccuracyError
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, builtin_plugin_spec, rewrite, trtconv_plugin_spec
from trtconv.rewrites.catalog import REWRITABLE, RULES, active_rules, rewrite_rule_for
from trtconv.rewrites.dcn.dialects import DIALECTS
from trtconv.rewrites.dcn.targets import TARGETS
from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.plugin_map.map_rule import PluginMapRule
from trtconv.rewrites.plugin_map.mapping import parse_plugin_map
from trtconv.rewrites.proof import NodeProofCase
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site
from trtconv.trt.plugins import dcnv2_kernel as dk

F = TensorProto.FLOAT
ROOT = Path(__file__).resolve().parents[2]


def test_the_registry_holds_rule_objects_one_per_dcn_dialect():
    assert all(isinstance(r, RewriteRule) for r in RULES)
    assert [r.name for r in RULES][:len(DIALECTS)] == [d.rule for d in DIALECTS]
    assert len({r.name for r in RULES}) == len(RULES)  # rule ids are unique
    for rule in (r for r in RULES if r.claims_ops):
        for domain, op in rule.ops:
            assert REWRITABLE[(domain, op)] is rule
            assert rewrite_rule_for(domain, op) is rule
            if domain == "":
                assert rewrite_rule_for("ai.onnx", op) is rule  # one domain, two spellings
    assert rewrite_rule_for("", "Conv") is None


def test_a_plugin_map_comes_before_the_built_in_rules():
    pmap = parse_plugin_map({"version": 1, "ops": [{"op_type": "DCNv2", "plugin": {"name": "P", "version": "1"}}]})
    rules = active_rules(pmap)
    assert isinstance(rules[0], PluginMapRule) and rules[1:] == RULES
    assert active_rules(None) == RULES


class SwishRule(RewriteRule):
    """A rule written outside trtconv: custom ``test::Swish`` -> Sigmoid + Mul, with its own
    reference (x * sigmoid(x) in float64) and proof inputs (random x of the node's shape)."""

    name = "swish"
    description = "test::Swish -> Sigmoid * x"
    ops = (("test", "Swish"),)

    def __init__(self, correct: bool = True) -> None:
        self.correct = correct

    def match(self, node: gs.Node, ctx: RuleContext) -> str | None:
        return node.inputs[0].name

    def emit(self, ctx: RuleContext, site: Site, match: str) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        x = site.inputs[0]
        sig = em.var("sigmoid", dtype=x.dtype)
        em.node("Sigmoid", "sigmoid", [x], [sig])
        if self.correct:
            em.node("Mul", "mul", [x, sig], list(site.outputs))
        else:  # forgets the product: only a numeric proof can tell
            em.node("Identity", "mul", [sig], list(site.outputs))
        return Emitted(tuple(em.nodes), "Sigmoid+Mul")

    def proof_case(self, ctx: RuleContext, site: Site, match: str, emitted: Emitted) -> NodeProofCase:
        x = np.random.default_rng(ctx.settings.seed + site.index).standard_normal((2, 5)).astype(np.float32)
        expected = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
        return NodeProofCase(emitted.nodes, site.outputs[0].name, {match: x}, expected, np.dtype(np.float32),
                             ctx.opset, shapes={"x": x.shape})


def _swish_model():
    nodes = [helper.make_node("Swish", ["x"], ["s"], name="swish0", domain="test"),
             helper.make_node("Relu", ["s"], ["y"], name="relu0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 5])],
                          [helper.make_tensor_value_info("y", F, [2, 5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test", 1)],
                             ir_version=9)


def test_the_driver_applies_and_proves_any_rule():
    res = rewrite(_swish_model(), rules=(SwishRule(),))
    assert [n.op_type for n in res.model.graph.node] == ["Sigmoid", "Mul", "Relu"]
    (entry,) = res.report.rewrites
    assert (entry.rule, entry.target, entry.node) == ("swish", "Sigmoid+Mul", "swish0")
    assert entry.proof.passed and entry.proof.method == "onnxruntime"
    assert "test" not in {o.domain for o in res.model.opset_import}  # the custom domain is gone
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_allclose(run_model(res.model, {"x": x})["y"], np.maximum(x / (1 + np.exp(-x)), 0), rtol=1e-6)


def test_the_driver_refuses_a_rule_whose_replacement_is_wrong():
    with pytest.raises(AccuracyError, match=r"node 'swish0' \(swish -> Sigmoid\+Mul\): max abs error"):
        rewrite(_swish_model(), rules=(SwishRule(correct=False),))
    # without proofs the same rule goes through, and the report says it was not proven
    res = rewrite(_swish_model(), RewriteSettings(verify=False), rules=(SwishRule(correct=False),))
    assert res.report.rewrites[0].proof.reason == "--no-verify"


def test_dcn_targets_are_data_and_settings_name_them():
    assert set(TARGETS) == {"deformconv", "trt-plugin", "trtconv-plugin", "portable"}
    assert all(t.name == name and callable(t.emit) for name, t in TARGETS.items())
    assert TARGETS["trtconv-plugin"].needs_spec and TARGETS["trt-plugin"].spec is not None
    assert TARGETS["deformconv"].opset == 19  # standard ops: proven in ONNX Runtime
    portable = TARGETS["portable"]  # computes the op another way: node proof only, graph proof cut there
    assert (portable.opset, portable.cut_graph_proof, portable.prepare is not None) == (16, True, True)


def test_the_one_dcn_plugin_spec_ships_in_the_package_and_matches_the_plugin():
    spec_file = resources.files("trtconv.rewrites.dcn").joinpath("dcnv2_spec.json")
    assert spec_file.is_file()
    doc = json.loads(spec_file.read_text(encoding="utf-8"))
    spec = builtin_plugin_spec()
    assert trtconv_plugin_spec() == spec
    assert (spec.name, spec.namespace, spec.version) == (dk.PLUGIN_NAME, dk.PLUGIN_NAMESPACE, dk.PLUGIN_VERSION)
    assert spec.inputs == tuple(i["name"] for i in doc["inputs"])
    # one copy in the source tree, nowhere else
    text = spec_file.read_bytes()
    copies = [p for p in ROOT.rglob("*.json")
              if ".git" not in p.parts and p.stat().st_size == len(text) and p.read_bytes() == text]
    assert [p.relative_to(ROOT).as_posix() for p in copies] == ["trtconv/rewrites/dcn/dcnv2_spec.json"]


def test_the_dcn_plugin_spec_is_found_inside_an_installed_wheel(tmp_path):
    """Built the way pip builds it, imported from the zip: no source tree to fall back on."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "trtconv", src / "trtconv", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("trtconv-*.whl")
    code = ("import trtconv.rewrites.dcn.plugin_spec as ps\n"
            f"assert ps.__file__.startswith({str(wheel)!r}), ps.__file__\n"
            "s = ps.trtconv_plugin_spec()\n"
            "print(s.namespace, s.name, s.version)\n")
    env = {**os.environ, "PYTHONPATH": str(wheel)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [dk.PLUGIN_NAMESPACE, dk.PLUGIN_NAME, dk.PLUGIN_VERSION]


def test_replacements_get_unique_names_when_node_names_collide():
    """Node names need not be unique in ONNX; the names replacements are built from must be."""
    nodes = [helper.make_node("Swish", ["x"], ["s"], name="sw", domain="test"),
             helper.make_node("Swish", ["s"], ["t"], name="sw", domain="test"),
             helper.make_node("Swish", ["t"], ["y"], domain="test"),  # unnamed: Swish_<index>, unless taken
             helper.make_node("Relu", ["x"], ["r"], name="Swish_3")]  # its index once sorted (last)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 5])],
                          [helper.make_tensor_value_info(n, F, [2, 5]) for n in ("y", "r")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test", 1)],
                              ir_version=9)
    res = rewrite(model, rules=(SwishRule(),))
    first, second, unnamed = (e.node for e in res.report.rewrites)
    assert (first, second) == ("sw", "sw_1")
    assert unnamed == "Swish_3_1"  # Swish_3 is the Relu's name
    names = [n.name for n in res.model.graph.node]
    assert len(names) == len(set(names))


def test_a_new_dcn_dialect_is_one_dialect_entry(tmp_path):
    """A deformable convolution written as ``test::MyDeformConv`` with mmcv's attributes: one
    ``Dialect`` (ops + reader) makes the rule; the targets, proofs and report come with it."""
    from builders import dcn_model

    from trtconv.rewrites.dcn.deform_rule import DcnRule
    from trtconv.rewrites.dcn.dialects import Dialect, read_mmcv

    model = onnx.load(dcn_model(tmp_path / "dcn.onnx"))
    node = next(n for n in model.graph.node if n.op_type == "DCNv2")
    node.op_type, node.domain = "MyDeformConv", "test"
    del node.attribute[:]
    node.attribute.extend([helper.make_attribute("stride", [1, 1]), helper.make_attribute("padding", [1, 1]),
                           helper.make_attribute("dilation", [1, 1]), helper.make_attribute("groups", 1),
                           helper.make_attribute("deform_groups", 1)])
    model.opset_import.append(helper.make_opsetid("test", 1))
    dialect = Dialect("dcnv2-test", "test::MyDeformConv -> DeformConv", (("test", "MyDeformConv"),), read_mmcv)
    assert rewrite_rule_for("test", "MyDeformConv") is None  # not built in
    res = rewrite(model, rules=(DcnRule(dialect),))
    (entry,) = res.report.rewrites
    assert (entry.rule, entry.target, entry.proof.method, entry.proof.passed) == (
        "dcnv2-test", "deformconv", "onnxruntime", True)
    assert "DeformConv" in [n.op_type for n in res.model.graph.node]
    assert res.report.graph_proof.passed
