"""What a DCN plugin node must look like: trtconv's own DCNv2 plugin (its one spec file,
``dcnv2_spec.json`` beside this module, read through ``importlib.resources`` so it works
from a wheel), TensorRT's ``ModulatedDeformConv2d``, or a user's spec (``--dcn-plugin-spec``).

The TensorRT side (``trtconv.trt.plugins``) reads the same file through
:func:`builtin_spec_document`: one copy, one reader.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from trtconv.errors import UsageError
from trtconv.rewrites.documents import read_document
from trtconv.rewrites.emitter import PLUGIN_DOMAIN

BUILTIN_SPEC_FILE = "dcnv2_spec.json"  # package data of trtconv.rewrites.dcn

ROLES = ("x", "offset", "mask", "weight", "bias")
FIELD_ROLES = ("stride", "padding", "pads", "dilation", "group", "deformable_group")


@dataclass(frozen=True)
class PluginSpec:
    """What a DCN plugin node must look like for TensorRT's fallback importer to build it."""

    name: str
    version: str
    namespace: str
    # input order, by role: x, offset, mask, weight, bias
    inputs: tuple[str, ...]
    # (field name, role); role in stride, padding ([h, w], symmetric), pads ([t, l, b, r]),
    # dilation, group, deformable_group
    fields: tuple[tuple[str, str], ...]
    # attributes with a fixed value (e.g. the trtconv plugin's aot=1, allow_tf32)
    constants: tuple[tuple[str, Any], ...] = ()
    mask_required: bool = True
    bias_required: bool = False
    weight_layout: str = "OIHW"  # or "OHWI"
    max_kernel_taps: int | None = None  # kh*kw limit the plugin states, if any
    domain: str = PLUGIN_DOMAIN
    source: str = "TensorRT libnvinfer_plugin"

    @property
    def symmetric_pads(self) -> bool:
        return any(role == "padding" for _, role in self.fields)


TRT_MODULATED_DEFORM_CONV = PluginSpec(
    name="ModulatedDeformConv2d",
    version="2",
    namespace="",
    inputs=("x", "offset", "mask", "weight", "bias"),
    fields=(("stride", "stride"), ("padding", "padding"), ("dilation", "dilation"), ("group", "group"),
            ("deformable_group", "deformable_group")),
)


def parse_plugin_spec(doc: Any, source: str) -> PluginSpec:
    """A decoded spec document as a :class:`PluginSpec`; UsageError naming ``source`` if it is not one."""
    try:
        plugin, node = doc["plugin"], doc.get("onnx_node", {})
        inputs = sorted(doc["inputs"], key=lambda d: int(d["index"]))
        roles = tuple(str(d["name"]) for d in inputs)
        if set(roles) - set(ROLES) or not {"x", "offset", "weight"} <= set(roles):
            raise ValueError(f"inputs {roles} are not a subset of {ROLES} with x, offset, weight")
        by_role = {str(d["name"]): d for d in inputs}
        fields: list[tuple[str, str]] = []
        constants: list[tuple[str, Any]] = []
        for a in doc["attributes"]:
            name = str(a["name"])
            if name in FIELD_ROLES:
                fields.append((name, name))
            elif "default" in a:
                constants.append((name, a["default"]))
            else:
                raise ValueError(f"attribute {name!r} has no known role and no default")
        for k, v in sorted(node.get("required_attributes", {}).items()):
            constants.append((str(k), v))
        missing = {"stride", "dilation", "group", "deformable_group"} - {r for _, r in fields}
        if missing or not {"padding", "pads"} & {r for _, r in fields}:
            raise ValueError(f"attributes lack {sorted(missing) or ['pads']}")
        weight_layout = str(by_role["weight"].get("layout", "OIHW")).upper()
        if weight_layout not in ("OIHW", "OHWI"):
            raise ValueError(f"weight layout {weight_layout!r} is neither OIHW nor OHWI")
        taps = re.search(r"kh\s*\*\s*kw\s*<=\s*(\d+)", str(doc.get("limits", {}).get("kernel_taps", "")))
        return PluginSpec(
            max_kernel_taps=int(taps.group(1)) if taps else None,
            name=str(node.get("op_type") or plugin["name"]),
            version=str(plugin.get("version", "1")),
            namespace=str(plugin.get("namespace", "")),
            inputs=roles,
            fields=tuple(fields),
            constants=tuple(constants),
            mask_required="mask" in by_role,
            bias_required="bias" in by_role,
            weight_layout=weight_layout,
            domain=str(node.get("domain") or plugin.get("namespace") or PLUGIN_DOMAIN),
            source=source,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"DCN plugin spec {source} is not usable: {type(exc).__name__}: {exc}",
            hint="see docs/rewrite.md (target trtconv-plugin) for the fields trtconv reads",
        ) from exc


def load_plugin_spec(path: str | os.PathLike[str]) -> PluginSpec:
    """Read a DCN plugin's machine-readable spec (JSON or YAML; trtconv's own: :func:`builtin_plugin_spec`)."""
    path = Path(path)
    return parse_plugin_spec(read_document(path, "DCN plugin spec"), str(path))


@lru_cache(maxsize=1)
def _builtin_text() -> str:
    return resources.files(__package__).joinpath(BUILTIN_SPEC_FILE).read_text(encoding="utf-8")


def builtin_spec_document() -> dict[str, Any]:
    """trtconv's DCNv2 plugin spec as decoded JSON (a fresh copy: callers may not change the shared one)."""
    doc: dict[str, Any] = json.loads(_builtin_text())
    return doc


def builtin_plugin_spec() -> PluginSpec:
    """trtconv's own DCNv2 plugin, from the spec shipped inside the package."""
    return parse_plugin_spec(builtin_spec_document(), f"trtconv/rewrites/dcn/{BUILTIN_SPEC_FILE}")


def trtconv_plugin_spec(path: str | os.PathLike[str] | None = None) -> PluginSpec:
    """The spec of trtconv's own DCNv2 plugin: the file at ``path``, or the one shipped inside
    the package (``--dcn-plugin-spec``'s default). The one lookup ``rewrite`` and ``build`` share."""
    if path is None:
        return builtin_plugin_spec()
    if not Path(path).is_file():
        raise UsageError(f"DCN plugin spec {path} not found",
                         hint="give the spec's path (`trtconv rewrite --dcn-plugin-spec PATH`), "
                              "or use --dcn-target deformconv")
    return load_plugin_spec(path)
