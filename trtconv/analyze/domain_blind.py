"""Custom-domain ops that TensorRT's parser imports as the ONNX op of the same name, where the two differ.

The parser picks a built-in importer by op type alone (the domain is ignored: every TensorRT
target, 10.x, 11.x and RTX, which ships the 11.x parser). For most such ops ONNX Runtime's
contrib op and the ONNX op agree (``com.microsoft::Gelu`` is ONNX's exact Gelu): a
``domain-ignored`` warning says so. For the ops listed here they do not, and the node is an
error whatever the parser does with it: either the import fails, or it succeeds and the engine
computes something else, with no error at all. Both measured with TensorRT-RTX 1.7.1's parser
and CPU-only builder (tests/analyze/test_domain_blind.py re-measures them where it is installed).
"""

from __future__ import annotations

from dataclasses import dataclass

from trtconv.analyze.check_report import ERROR, PARSER, Finding

DOMAIN_BLIND = "domain-blind-import"
FAILS, WRONG_ENGINE = "fails", "wrong-engine"


@dataclass(frozen=True)
class Collision:
    outcome: str  # FAILS: the ONNX op's importer rejects the node; WRONG_ENGINE: it parses and builds wrongly
    why: str  # how the two ops differ, and what the parser then does


COLLISIONS: dict[tuple[str, str], Collision] = {
    ("com.microsoft", "Attention"): Collision(
        FAILS, "ONNX Attention takes Q, K and V; this op takes one input and packed QKV weights: the import fails "
               "('Q, K, and V inputs must have the same number of dimensions')"),
    ("com.microsoft", "RotaryEmbedding"): Collision(
        WRONG_ENGINE, "ONNX RotaryEmbedding takes (X, cos_cache, sin_cache, position_ids), this op (input, "
                      "position_ids, cos_cache, sin_cache): it parses and builds an engine that computes something "
                      "else, without an error"),
}


def collision_finding(domain: str, op_type: str) -> Finding | None:
    """The error for a custom-domain node the parser would import as a different ONNX op, or None."""
    found = COLLISIONS.get((domain, op_type))
    if found is None:
        return None
    return Finding(DOMAIN_BLIND, ERROR, f"{domain}::{op_type} is imported as the ONNX operator {op_type} (the "
                                        f"parser ignores the domain), which differs: {found.why}",
                   f"rewrite it into standard ONNX operators ({op_type} of the ONNX domain is another op)", PARSER)
