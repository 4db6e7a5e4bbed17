"""The rewrite framework knows no rule family: families are subpackages the catalog lists."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import trtconv.rewrites
from trtconv.rewrites import catalog, dcn

REWRITES = Path(trtconv.rewrites.__file__).parent
# where families are named: the registry, and the package's front door re-exporting their names
FAMILY_AWARE = {"catalog.py", "__init__.py"}


def _runtime_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """Imported module names outside ``if TYPE_CHECKING:`` blocks (annotations only)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, node.lineno)] + [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def family_imports(rewrites_dir: Path) -> list[str]:
    """Framework modules (rewrites/*.py but the catalog) that import a family subpackage."""
    families = sorted(p.name for p in rewrites_dir.iterdir() if (p / "__init__.py").exists())
    bad = []
    for path in sorted(rewrites_dir.glob("*.py")):
        if path.name in FAMILY_AWARE:
            continue
        for name, line in _runtime_imports(ast.parse(path.read_text())):
            if any(name == f"trtconv.rewrites.{f}" or name.startswith(f"trtconv.rewrites.{f}.") for f in families):
                bad.append(f"{path.name}:{line}")
    return sorted(set(bad))


def test_the_framework_imports_no_rule_family():
    assert family_imports(REWRITES) == []


def test_family_import_check_catches_a_planted_import(tmp_path: Path):
    copy = tmp_path / "rewrites"
    shutil.copytree(REWRITES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "proof.py"
    target.write_text(target.read_text() + "\nfrom trtconv.rewrites.dcn.dialects import DIALECTS  # noqa\n"
                      "from trtconv.rewrites import plugin_map  # noqa\n")
    found = family_imports(copy)
    assert len(found) == 2 and all(f.startswith("proof.py:") for f in found), found


def test_every_family_subpackage_is_registered_in_the_catalog():
    subpackages = {p.name for p in REWRITES.iterdir() if (p / "__init__.py").exists()}
    registered = {f.name for f in catalog.FAMILIES} | {"plugin_map"}  # the user's map: active_rules adds it
    assert subpackages == registered
    assert catalog.RULES == tuple(r for f in catalog.FAMILIES for r in f.rules)
    assert catalog.RULES[:len(dcn.FAMILY.rules)] == dcn.FAMILY.rules  # DCN first


def test_unknown_dcn_target_is_refused_by_the_dcn_family():
    import pytest

    from trtconv.errors import UsageError
    from trtconv.rewrites import RewriteSettings

    with pytest.raises(UsageError, match="unknown DCN target"):
        catalog.check_settings(RewriteSettings(dcn_target="nope"))
    with pytest.raises(UsageError, match="needs the plugin's spec"):
        catalog.check_settings(RewriteSettings(dcn_target="trtconv-plugin"))
    assert dcn.DEFAULT_TARGET == RewriteSettings().dcn_target in dcn.TARGETS


def _one_letter_apart(a: str, b: str) -> bool:
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def test_no_two_module_names_in_one_folder_differ_by_one_letter():
    bad = []
    for folder in [REWRITES, *(p for p in REWRITES.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        stems = sorted(p.stem for p in folder.glob("*.py"))
        bad += [f"{folder.name}/{a} vs {b}" for i, a in enumerate(stems) for b in stems[i + 1:] if _one_letter_apart(a, b)]
    assert not bad, bad
    assert _one_letter_apart("dcn_target", "dcn_targets")  # the check can fail
