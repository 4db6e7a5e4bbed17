"""The TensorRT boundary: only trtconv.trt may import tensorrt or tensorrt_rtx (TensorRT-RTX)."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    "verify bench inspection triton htmlreport",
    "pipeline",
    "api",
    "cli",
    "__main__ launcher",
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


def _lazy_exports(pkg_dir: Path) -> dict[str, str]:
    """trtconv's lazy attributes (PEP 562): public name -> the module that defines it."""
    for node in ast.walk(ast.parse((pkg_dir / "__init__.py").read_text())):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(x, ast.Name) and x.id == "_EXPORTS" for x in targets) and node.value is not None:
                exports: dict[str, str] = ast.literal_eval(node.value)
                return exports
    return {}


def _resolve(name: str, exports: dict[str, str]) -> str:
    """What ``name`` really loads: ``trtconv.check`` (a lazy attribute) -> ``trtconv.api``;
    ``trtconv.__version__`` -> ``trtconv``; module names stay as they are."""
    parts = name.split(".")
    if parts[0] != "trtconv" or len(parts) < 2:
        return name
    if parts[1] in exports:
        return exports[parts[1]]
    if parts[1].startswith("__"):
        return "trtconv"
    return name


def _imports(path: Path, pkg_dir: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import in ``path``: import statements
    (``from trtconv import api`` and ``from .. import api`` import ``trtconv.api``), calls of
    ``importlib.import_module``/``__import__`` with a literal name, and ``trtconv.<name>``
    attribute use (the package's lazy attributes load their module). Lazy names resolve to it."""
    module = _module_name(path, pkg_dir)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    exports = _lazy_exports(pkg_dir)
    tree = ast.parse(path.read_text())
    local: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            local.update(id(n) for n in ast.walk(fn))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # ``from trtconv import api`` / ``from .. import api``: the names are what is imported
            names = [f"{name}.{a.name}" for a in node.names] if name == "trtconv" else [name]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")):
            names = [node.args[0].value]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trtconv":
            names = [f"trtconv.{node.attr}"]
        lazy = id(node) in local and not isinstance(node, ast.Attribute)  # using a name is no import
        found += [(_resolve(n, exports), node.lineno, lazy) for n in names]
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


def _copy_with(tmp_path: Path, rel: str, planted: str) -> Path:
    """A copy of the package with ``planted`` appended to ``rel``."""
    import shutil

    copy = tmp_path / "trtconv"
    shutil.copytree(PKG_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.ptx"))
    target = copy / rel
    target.write_text(target.read_text() + planted)
    return copy


def test_layers_test_catches_a_planted_upward_import(tmp_path: Path):
    """The check above must be able to fail: plant an upward and a lazy import in a copy."""
    copy = _copy_with(tmp_path, "load/shapes.py", "\n\ndef _planted():\n    import json\n"
                      "\n\nfrom trtconv.api import check  # noqa\n")
    found = layer_violations(copy)
    assert any("load imports trtconv.api, a higher layer" in b for b in found), found
    assert any("`json` imported inside a function" in b for b in found), found
    assert len(found) == 2, found


@pytest.mark.parametrize("planted", [
    "from trtconv import api  # noqa",
    "from .. import api  # noqa",
    "import importlib\nimportlib.import_module('trtconv.api')",
    "__import__('trtconv.api')",
    "import trtconv\n\n\ndef _planted():\n    return trtconv.check('model.onnx')",
])
def test_layers_test_catches_every_way_of_reaching_a_higher_layer(tmp_path: Path, planted: str):
    """Issue 24's five holes: each form, planted in load/, is an upward import of trtconv.api."""
    found = layer_violations(_copy_with(tmp_path, "load/shapes.py", "\n\n" + planted + "\n"))
    assert len(found) == 1 and "load imports trtconv.api, a higher layer" in found[0], found


def test_the_package_version_stays_importable_from_anywhere(tmp_path: Path):
    found = layer_violations(_copy_with(tmp_path, "load/shapes.py", "\n\nfrom trtconv import __version__  # noqa\n"
                                        "import trtconv\n\nVERSION = trtconv.__version__\n"))
    assert found == [], found


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


# --------------------------------------------------------------------------- front doors
# Each package says in its ``__init__``'s ``__all__`` what other packages may use; they import
# only that, only from there (docs/design.md, "Front doors"). Inside a package anything goes.
def _packages(pkg_dir: Path) -> set[str]:
    return {p.name for p in pkg_dir.iterdir() if (p / "__init__.py").exists()}


def _front_door(pkg_dir: Path, package: str) -> set[str] | None:
    """The names in ``trtconv/<package>/__init__.py``'s ``__all__`` (None: it has none)."""
    for node in ast.parse((pkg_dir / package / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def front_door_violations(pkg_dir: Path = PKG_DIR) -> list[str]:
    packages = _packages(pkg_dir)
    doors = {p: _front_door(pkg_dir, p) for p in packages}
    bad = []
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(pkg_dir.parent)
        module = _module_name(path, pkg_dir)
        unit, package = _unit(module), (module if path.name == "__init__.py" else module.rpartition(".")[0])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
                targets = [(name, [a.name for a in node.names])]
            else:
                continue
            for name, names in targets:
                parts = name.split(".")
                if parts[0] != "trtconv" or len(parts) < 2 or parts[1] not in packages or parts[1] == unit:
                    continue
                if len(parts) > 2 or names is None:
                    bad.append(f"{rel}:{node.lineno}: imports {name}, an inner module of trtconv.{parts[1]}: "
                               f"import from trtconv.{parts[1]} (its __all__)")
                    continue
                door = doors[parts[1]] or set()
                bad += [f"{rel}:{node.lineno}: imports {n} from trtconv.{parts[1]}, not in its __all__"
                        for n in names if n not in door]
    return bad


def test_every_package_has_a_front_door():
    missing = sorted(p for p in _packages(PKG_DIR) if _front_door(PKG_DIR, p) is None)
    assert not missing, f"no __all__ in the __init__ of: {missing}"


def test_packages_import_each_other_only_through_front_doors():
    bad = front_door_violations()
    assert not bad, "an import past a package's front door (docs/design.md, 'Front doors'):\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    "from trtconv.load.shapes import value_shapes  # noqa",
    "from trtconv.load import shapes  # noqa",
    "import trtconv.load.shapes  # noqa",
])
def test_front_door_check_catches_an_import_of_an_inner_module(tmp_path: Path, planted: str):
    found = front_door_violations(_copy_with(tmp_path, "precision/bn_fold.py", "\n\n" + planted + "\n"))
    assert len(found) == 1 and found[0].startswith("trtconv/precision/bn_fold.py:"), found


# The CLI calls only the Python API (issue 24): trtconv.api, the shared error and output helpers,
# the settings declarations (trtconv.settings: what every user may read) and its own modules.
CLI_MAY_IMPORT = frozenset({"api", "errors", "outputs", "settings", "cli"})


def cli_violations(pkg_dir: Path = PKG_DIR) -> list[str]:
    bad = []
    for path in sorted((pkg_dir / "cli").rglob("*.py")):
        for name, line, _ in _imports(path, pkg_dir):
            if name.split(".")[0] == "trtconv" and name != "trtconv" and _unit(name) not in CLI_MAY_IMPORT:
                bad.append(f"{path.relative_to(pkg_dir.parent)}:{line}: imports {name}")
    return bad


def test_cli_imports_only_the_python_api():
    bad = cli_violations()
    assert not bad, "the CLI reaches past trtconv.api:\n" + "\n".join(bad)


def test_cli_check_catches_a_deep_import(tmp_path: Path):
    copy = _copy_with(tmp_path, "cli/doctor_command.py", "\n\nfrom trtconv.precision.int8 import quantize_int8  # noqa\n")
    before = set(cli_violations())
    found = set(cli_violations(copy)) - {b for b in before}
    assert len(found) == 1 and "trtconv.precision.int8" in next(iter(found)), found


# --------------------------------------------------------------------------- names
def name_clashes(pkg_dir: Path = PKG_DIR) -> set[str]:
    """Modules named like their own package, like another top-level unit, or like another module."""
    units = {p.name for p in pkg_dir.iterdir() if (p / "__init__.py").exists()}
    units |= {p.stem for p in pkg_dir.glob("*.py") if p.stem != "__init__"}
    seen: dict[str, list[str]] = {}
    clashes = set()
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(pkg_dir).as_posix()
        if path.stem.startswith("__") or path.parent == pkg_dir:
            continue
        seen.setdefault(path.stem, []).append(rel)
        if path.stem == path.parent.name:
            clashes.add(f"{rel}: named like its package")
        elif path.stem in units:
            clashes.add(f"{rel}: named like the package trtconv.{path.stem}")
    clashes |= {f"{' and '.join(paths)}: one name" for paths in seen.values() if len(paths) > 1}
    return clashes


# No clash is left: the CLI's command modules are ``<command>_command.py`` (the stages keep the
# stage names, pipeline/build.py etc.). Nothing may join this list.
NAME_CLASHES_LEFT: frozenset[str] = frozenset()


def test_module_names_are_unique_and_unlike_packages():
    assert name_clashes() <= NAME_CLASHES_LEFT, sorted(name_clashes() - NAME_CLASHES_LEFT)


def test_name_check_catches_planted_clashes(tmp_path: Path):
    copy = _copy_with(tmp_path, "errors.py", "")
    for rel in ("plan/plan.py", "verify/load.py", "bench/proof.py"):
        (copy / rel).write_text('"""planted"""\n')
    found = name_clashes(copy) - NAME_CLASHES_LEFT
    assert found == {"plan/plan.py: named like its package", "verify/load.py: named like the package trtconv.load",
                     "bench/proof.py and rewrites/proof.py: one name"}, found


# --------------------------------------------------------------------------- sizes
# No module over 500 lines; no function over 80 lines unless a comment or its docstring says at its
# top why ("Over 80 lines: ..."), between the ``def`` line and the end of the docstring.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def size_violations(pkg_dir: Path = PKG_DIR) -> list[str]:
    bad = []
    for path in sorted(pkg_dir.rglob("*.py")):
        rel = path.relative_to(pkg_dir.parent)
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES:
            bad.append(f"{rel}: {len(lines)} lines (at most {MAX_MODULE_LINES}): split it along a seam")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            top = "\n".join(lines[node.lineno - 1: node.body[0].end_lineno or node.body[0].lineno])
            if length > MAX_FUNCTION_LINES and "Over 80 lines" not in top:
                bad.append(f"{rel}:{node.lineno}: {node.name} is {length} lines (at most {MAX_FUNCTION_LINES}, "
                           "or say why at its top: 'Over 80 lines: ...')")
    return bad


def test_no_module_over_500_lines_and_no_long_function_without_a_reason():
    bad = size_violations()
    assert not bad, "\n".join(bad)


def test_size_check_catches_a_long_module_and_a_long_function(tmp_path: Path):
    long_function = "\n\ndef planted_long() -> int:\n    x = 0\n" + "    x += 1\n" * 80 + "    return x\n"
    copy = _copy_with(tmp_path, "errors.py", long_function)
    (copy / "load" / "planted_module.py").write_text('"""planted"""\n' + "X = 1\n" * 500)
    found = set(size_violations(copy))
    assert {f.split(":")[0] for f in found} == {"trtconv/errors.py", "trtconv/load/planted_module.py"}, found
    assert any("planted_long is 83 lines" in f for f in found), found
    reasoned = long_function.replace("int:\n", "int:\n    # Over 80 lines: planted with a reason.\n")
    copy2 = _copy_with(tmp_path / "b", "errors.py", reasoned)
    assert not size_violations(copy2), size_violations(copy2)
