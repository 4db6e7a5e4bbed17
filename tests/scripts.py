"""The repository's own scripts (plugins/, tools/) imported as modules, for tests that call their functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str, name: str) -> ModuleType:
    """``ROOT / relpath`` imported as module ``name`` (these scripts are not in a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
