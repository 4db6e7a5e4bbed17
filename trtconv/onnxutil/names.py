"""Fresh tensor and node names: passes that add nodes must not reuse a name (ONNX names are model-wide)."""

from __future__ import annotations

import onnx

from trtconv.onnxutil.walk import iter_graphs


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken``, which it joins."""
    cand, k = base, 0
    while cand in taken:
        k += 1
        cand = f"{base}_{k}"
    taken.add(cand)
    return cand


def model_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor and node name in the model, subgraphs included: what :func:`fresh_name` must avoid."""
    names: set[str] = set()
    for g in iter_graphs(model.graph):
        names.update(i.name for i in g.input)
        names.update(t.name for t in g.initializer)
        names.update(o.name for o in g.output)
        names.update(v.name for v in g.value_info)
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
            names.add(n.name)
    return names
