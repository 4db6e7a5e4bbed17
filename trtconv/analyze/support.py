"""The per-version support tables: data files in ``data/``, one per TensorRT version.

A row says whether the target parser imports an op (or which built-in plugin a custom
op resolves to), which input dtypes it takes, the parameters the restriction rules use,
and where the fact comes from. ``maketables.py`` regenerates the files from the facts.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

from onnx import TensorProto

from trtconv.errors import UsageError
from trtconv.onnxutil import is_default_domain

DATA_DIR = Path(__file__).parent / "data"

# The table's type vocabulary (onnx-tensorrt's) -> ONNX element types.
TYPE_CODES: dict[str, tuple[int, ...]] = {
    "FP32": (TensorProto.FLOAT,),
    "FP16": (TensorProto.FLOAT16,),
    "BF16": (TensorProto.BFLOAT16,),
    "FP8": (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ),
    "FP4": (TensorProto.FLOAT4E2M1,),
    "INT4": (TensorProto.INT4,),
    "INT8": (TensorProto.INT8,),
    "INT32": (TensorProto.INT32,),
    "INT64": (TensorProto.INT64,),
    "UINT8": (TensorProto.UINT8,),
    "BOOL": (TensorProto.BOOL,),
    "DOUBLE": (TensorProto.DOUBLE,),
}
PLUGIN_STATUSES = ("builtin-plugin", "deprecated-plugin", "removed-plugin")


@dataclass(frozen=True)
class OpSupport:
    """One row of a support table."""

    op_type: str
    domain: str  # "" = ONNX default domain; "*" = any domain (plugins, TRT custom ops)
    status: str  # supported | unsupported | builtin-plugin | deprecated-plugin | removed-plugin
    types: tuple[str, ...]  # accepted dtypes of the first (data) input; empty = not recorded
    params: dict[str, tuple[str, ...]]
    since: str
    source: str
    restrictions: str
    codes: frozenset[int] = frozenset()  # ONNX element types of ``types``

    @property
    def is_plugin(self) -> bool:
        return self.status in PLUGIN_STATUSES

    def type_codes(self) -> frozenset[int]:
        return self.codes

    def param(self, key: str) -> tuple[str, ...]:
        return self.params.get(key, ())


@dataclass(frozen=True)
class SupportTable:
    version: str
    ops: dict[str, OpSupport]  # default-domain ONNX operators
    any_domain: dict[str, OpSupport]  # plugins and TensorRT custom ops, matched by op type

    @property
    def product(self) -> str:
        """As a user reads it: "TensorRT 11.4", "TensorRT-RTX" (the table named "rtx")."""
        return "TensorRT-RTX" if self.version == "rtx" else f"TensorRT {self.version}"

    @property
    def loads_plugins(self) -> bool:
        """Whether this TensorRT has a plugin library (and so can load others): TensorRT-RTX has none."""
        return any(r.status in ("builtin-plugin", "deprecated-plugin") for r in self.any_domain.values())

    def lookup(self, domain: str, op_type: str) -> OpSupport | None:
        """The row for a node: ONNX operators first (default domain), then plugins by name."""
        if is_default_domain(domain) and op_type in self.ops:
            return self.ops[op_type]
        return self.any_domain.get(op_type)


def _params(text: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, _, value = item.partition("=")
        out[key.strip()] = tuple(v.strip() for v in value.split("|") if v.strip())
    return out


def available_versions() -> tuple[str, ...]:
    return tuple(sorted(p.stem.removeprefix("trt-") for p in DATA_DIR.glob("trt-*.tsv")))


@functools.cache
def load_table(version: str) -> SupportTable:
    path = DATA_DIR / f"trt-{version}.tsv"
    if not path.is_file():
        raise UsageError(f"no support table for TensorRT {version}",
                         hint=f"known versions: {', '.join(available_versions())}")
    ops: dict[str, OpSupport] = {}
    any_domain: dict[str, OpSupport] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for rec in csv.DictReader(fh, delimiter="\t"):
            types = tuple(t for t in rec["types"].split(",") if t)
            row = OpSupport(
                op_type=rec["op_type"], domain=rec["domain"], status=rec["status"],
                types=types, params=_params(rec["params"]),
                since=rec["since"], source=rec["source"], restrictions=rec["restrictions"],
                codes=frozenset(c for t in types for c in TYPE_CODES.get(t, ())),
            )
            (any_domain if row.domain == "*" else ops)[row.op_type] = row
    return SupportTable(version, ops, any_domain)
