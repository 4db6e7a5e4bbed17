"""Reading the users' JSON and YAML files (plugin maps, DCN plugin specs): every way such a
file can be unreadable becomes one line naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from trtconv.errors import UsageError


def read_document(path: str | os.PathLike[str], what: str) -> Any:
    """A user's JSON (``.json``) or YAML file, parsed; every way it can be unreadable is a
    one-line UsageError naming ``what`` and the file (plugin maps and plugin specs)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    fmt = "JSON" if path.suffix == ".json" else "YAML"
    try:
        return json.loads(text) if fmt == "JSON" else yaml.safe_load(text)
    except RecursionError as exc:
        raise UsageError(f"{what} {path} is nested too deeply to be a {what}") from exc
    except (ValueError, yaml.YAMLError) as exc:  # json.JSONDecodeError is a ValueError
        raise UsageError(f"{what} {path} is not valid {fmt}: {str(exc).splitlines()[0]}") from exc
