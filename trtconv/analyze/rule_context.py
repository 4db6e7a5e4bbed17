"""What a restriction rule sees and how rules register: :class:`NodeContext` (the node, its
support-table row, the graph index), the registries keyed by op type and by table parameter,
and the ONNX schema names a rule's message uses for inputs and outputs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import TensorProto, helper

from trtconv.analyze.check_report import Finding
from trtconv.analyze.lookups import GraphIndex
from trtconv.analyze.support import OpSupport
from trtconv.onnxutil import normalize_domain

Rule = Callable[["NodeContext"], Iterator[Finding]]
RULES: dict[str, list[Rule]] = {}  # op type -> its restriction rules
GENERIC_RULES: list[tuple[str, Rule]] = []  # (table parameter that switches it on, rule)


@dataclass(slots=True)
class NodeContext:
    """What a rule sees. Not frozen: one is made per node, and frozen init is 3x slower."""

    node: onnx.NodeProto
    path: str
    opset: int
    row: OpSupport
    index: GraphIndex

    def attr(self, name: str, default: Any = None) -> Any:
        for a in self.node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.node.attribute)

    def input(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def output(self, i: int) -> str:
        return self.node.output[i] if i < len(self.node.output) else ""

    def input_label(self, i: int) -> str:
        return f"input {i} ({_input_name(self.node.op_type, self.node.domain, self.opset, i)!r})"

    def output_label(self, i: int) -> str:
        return f"output {i} ({_output_name(self.node.op_type, self.node.domain, self.opset, i)!r})"


def restriction(*op_types: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in op_types:
            RULES.setdefault(op, []).append(fn)
        return fn

    return register


def generic(param: str) -> Callable[[Rule], Rule]:
    """A rule for every row that sets ``param`` ("types" = the row lists input dtypes)."""

    def register(fn: Rule) -> Rule:
        GENERIC_RULES.append((param, fn))
        return fn

    return register


@functools.lru_cache(maxsize=4096)
def _schema(op: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, max(opset, 1), normalize_domain(domain))
    except Exception:
        return None


def _formal(params: list[Any], i: int) -> str:
    if not params:
        return "?"
    if i < len(params):
        return str(params[i].name)
    last = params[-1]
    return str(last.name) if last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic else "?"


def _input_name(op: str, domain: str, opset: int, i: int) -> str:
    s = _schema(op, domain, opset)
    return _formal(list(s.inputs), i) if s else "?"


def _output_name(op: str, domain: str, opset: int, i: int) -> str:
    s = _schema(op, domain, opset)
    return _formal(list(s.outputs), i) if s else "?"


def dtype_name(code: int) -> str:
    try:
        return str(TensorProto.DataType.Name(code))
    except ValueError:
        return str(code)
