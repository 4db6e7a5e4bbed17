"""The TensorRT boundary: only trtconv.trt may import tensorrt or tensorrt_rtx (TensorRT-RTX)."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import trtconv

PKG_DIR = Path(trtconv.__file__).parent
TRT_MODULES = ("tensorrt", "tensorrt_rtx", "tensorrt_bindings", "tensorrt_rtx_bindings")


def _is_trt(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in TRT_MODULES)


def _modules() -> list[str]:
    names = ["trtconv"]
    for info in pkgutil.walk_packages([str(PKG_DIR)], prefix="trtconv."):
        if info.name == "trtconv.trt" or info.name.startswith("trtconv.trt."):
            continue
        names.append(info.name)
    return names


def test_no_module_outside_trt_loads_tensorrt():
    """Not even trtconv.trt's own modules load TensorRT or TensorRT-RTX on import: only on first use."""
    trt_mods = [info.name for info in pkgutil.walk_packages([str(PKG_DIR / "trt")], prefix="trtconv.trt.")]
    mods = [m for m in _modules() if m != "trtconv.__main__"] + ["trtconv.trt", *trt_mods]
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        f"bad = sorted(k for k in sys.modules if any(k == m or k.startswith(m + '.') for m in {TRT_MODULES!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"tensorrt loaded by importing trtconv modules: {out.stdout}"
    assert len(mods) > 10


def test_tensorrt_imported_only_under_trt_package():
    offenders = []
    for path in PKG_DIR.rglob("*.py"):
        rel = path.relative_to(PKG_DIR)
        if rel.parts[0] == "trt":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(_is_trt(n) for n in names):
                offenders.append(f"{rel}:{node.lineno}")
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
                    and node.args and isinstance(node.args[0], ast.Constant) and _is_trt(str(node.args[0].value))):
                offenders.append(f"{rel}:{node.lineno} (import_module)")
    assert not offenders, f"tensorrt/tensorrt_rtx imported outside trtconv/trt/: {offenders}"


# --------------------------------------------------------------------------- layers
# Bottom to top (docs/design.md). A module may import trtconv modules of its own package and of
# lower layers; packages that share a layer do not import each other. ``trtconv`` itself
# (``__version__``) is importable from anywhere: its other names resolve lazily.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(s.split()) for s in (
    "errors settings",
    "outputs onnxutil",
    "load",
    "reference",
    "samples",
    "rewrites",
    "analyze",
    "precision",
    "plan",
    "trt",
    "verify bench",
    "pipeline",
    "api",
    "cli",
    "__main__",
))
# Optional or slow-to-import dependencies may be imported inside functions; nothing else is.
LAZY_OK = frozenset({"tensorrt", "tensorrt_rtx", "onnxruntime", "torch", "torchvision", "cupy", "polygraphy",
                     "modelopt"})


def _unit(module: str) -> str:
    """trtconv.rewrites.dcn -> rewrites; trtconv.api -> api; trtconv -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(unit: str) -> int:
    for i, units in enumerate(LAYERS):
        if unit in units:
            return i
    raise AssertionError(f"trtconv.{unit} is in no layer: add it to LAYERS and to docs/design.md")


def _module_name(path: Path, pkg_dir: Path = PKG_DIR) -> str:
    rel = path.relative_to(pkg_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, pkg_dir: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import statement in ``path``."""
    module = _module_name(path, pkg_dir)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    local: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            local.update(id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in local) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((name, node.lineno, id(node) in local))
    return found


def layer_violations(pkg_dir: Path = PKG_DIR) -> list[str]:
    bad = []
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(pkg_dir.parent)
        unit = _unit(_module_name(path, pkg_dir))
        if not unit:
            continue
        own = _layer(unit)
        for name, line, in_function in _imports(path, pkg_dir):
            top = name.split(".")[0]
            if in_function and top not in LAZY_OK:
                bad.append(f"{rel}:{line}: `{name}` imported inside a function (only {sorted(LAZY_OK)} may be)")
            if top != "trtconv" or name == "trtconv":
                continue
            target = _unit(name)
            if target == unit:
                continue
            theirs = _layer(target)
            if theirs > own:
                bad.append(f"{rel}:{line}: {unit} imports {name}, a higher layer")
            elif theirs == own:
                bad.append(f"{rel}:{line}: {unit} imports {name}, a sibling in the same layer")
    return bad


def test_packages_import_only_downwards_and_only_heavy_dependencies_lazily():
    bad = layer_violations()
    assert not bad, "layering broken (docs/design.md, 'Layers'):\n" + "\n".join(bad)


def test_layers_test_catches_a_planted_upward_import(tmp_path: Path):
    """The check above must be able to fail: plant an upward and a lazy import in a copy."""
    import shutil

    copy = tmp_path / "trtconv"
    shutil.copytree(PKG_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.ptx"))
    target = copy / "load" / "shapes.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    import json\n"
                      "\n\nfrom trtconv.api import check  # noqa\n")
    found = layer_violations(copy)
    assert any("load imports trtconv.api, a higher layer" in b for b in found), found
    assert any("`json` imported inside a function" in b for b in found), found
    assert len(found) == 2, found


def test_every_package_is_in_a_layer():
    units = {p.name for p in PKG_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in PKG_DIR.glob("*.py") if p.stem != "__init__"}
    placed = set().union(*LAYERS)
    assert units <= placed, f"not in LAYERS: {sorted(units - placed)}"


# --------------------------------------------------------------------------- graph editing
# One graph-editing style (docs/design.md, "Graph editing"): who produces or reads a tensor comes
# from onnxutil's GraphView (rewrites: onnx-graphsurgeon), never from a map a pass builds itself.
EDGE_MAP_FREE = ("precision",)


def _edge_maps_in(tree: ast.AST) -> list[int]:
    """Lines that key a dict by node outputs or inputs: ``{o: n for n in g.node for o in n.output}``,
    or ``for o in n.output: m[o] = ...`` (``m.setdefault(o, ...)``, and the same over ``.input``)."""
    def over_edges(loop: ast.comprehension | ast.For) -> str | None:
        it = loop.iter
        if isinstance(it, ast.Attribute) and it.attr in ("output", "input") and isinstance(loop.target, ast.Name):
            return loop.target.id
        return None

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.DictComp) and isinstance(node.key, ast.Name) \
                and node.key.id in {over_edges(g) for g in node.generators}:
            lines.append(node.lineno)
        elif isinstance(node, ast.For) and (name := over_edges(node)):
            for inner in ast.walk(node):
                keyed = (isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store)
                         and isinstance(inner.slice, ast.Name) and inner.slice.id == name)
                keyed |= (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                          and inner.func.attr == "setdefault" and bool(inner.args)
                          and isinstance(inner.args[0], ast.Name) and inner.args[0].id == name)
                if keyed:
                    lines.append(inner.lineno)
    return lines


def edge_map_violations(pkg_dir: Path = PKG_DIR) -> list[str]:
    bad = []
    for unit in EDGE_MAP_FREE:
        for path in sorted((pkg_dir / unit).rglob("*.py")):
            bad += [f"{path.relative_to(pkg_dir.parent)}:{line}" for line in _edge_maps_in(ast.parse(path.read_text()))]
    return bad


def test_precision_passes_build_no_producer_or_consumer_map_of_their_own():
    bad = edge_map_violations()
    assert not bad, ("a hand-made producer/consumer map; ask trtconv.onnxutil.graph.GraphView instead:\n"
                     + "\n".join(bad))


def test_edge_map_check_catches_planted_maps(tmp_path: Path):
    """The check above must be able to fail: plant a producer map and a consumer map in a copy."""
    import shutil

    copy = tmp_path / "trtconv"
    shutil.copytree(PKG_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.ptx"))
    target = copy / "precision" / "bn_fold.py"
    target.write_text(target.read_text() + (
        "\n\ndef _planted(graph):\n"
        "    producer = {o: n for n in graph.node for o in n.output}\n"
        "    readers = {}\n"
        "    for n in graph.node:\n"
        "        for name in n.input:\n"
        "            readers.setdefault(name, []).append(n)\n"
        "    return producer, readers\n"))
    found = edge_map_violations(copy)
    assert len(found) == 2 and all(f.startswith("trtconv/precision/bn_fold.py:") for f in found), found
