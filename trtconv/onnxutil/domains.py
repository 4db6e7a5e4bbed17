"""Operator-set domain names: ONNX spells its default domain both "" and "ai.onnx".

Compare domains only after :func:`normalize_domain`; everything here means the
normalised spelling.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

DEFAULT_DOMAIN = ""
# Domains whose operators the ONNX standard defines (onnx.defs knows their schemas).
STANDARD_DOMAINS: frozenset[str] = frozenset({DEFAULT_DOMAIN, "ai.onnx.ml"})
# Domains ONNX Runtime's CPU provider implements: the standard ones and its contrib ops.
ORT_DOMAINS: frozenset[str] = STANDARD_DOMAINS | {"com.microsoft"}


def normalize_domain(domain: str | None) -> str:
    """"" for ONNX's default domain however it is spelled (None, "", "ai.onnx"); others as given."""
    return DEFAULT_DOMAIN if domain in (None, "", "ai.onnx") else str(domain)


def is_default_domain(domain: str | None) -> bool:
    return normalize_domain(domain) == DEFAULT_DOMAIN


def qualified_op(domain: str | None, op_type: str) -> str:
    """``Conv`` for the default domain, ``mmcv::MMCVModulatedDeformConv2d`` for the others."""
    dom = normalize_domain(domain)
    return f"{dom}::{op_type}" if dom else op_type


def display_domain(domain: str | None) -> str:
    """The name reports show: ``ai.onnx`` for the default domain (an empty string reads as missing)."""
    return normalize_domain(domain) or "ai.onnx"


def opset_versions(opset_import: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    """Normalised domain -> imported version."""
    return {normalize_domain(o.domain): int(o.version) for o in opset_import}


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default domain the model imports (0 when it imports none)."""
    return opset_versions(model.opset_import).get(DEFAULT_DOMAIN, 0)
