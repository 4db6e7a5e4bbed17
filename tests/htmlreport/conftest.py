from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cdp import Browser, find_browser  # noqa: E402


def _install_chromium() -> str | None:
    """Debian's chromium, installed by apt when running as root (CI containers); else None."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        if subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode != 0:
            return None
    return find_browser()


@pytest.fixture(scope="session")
def browser():
    binary = find_browser() or _install_chromium()
    if binary is None:
        pytest.skip("no Chromium here and it cannot be installed (needs root and apt-get: `apt-get install chromium`)")
    b = Browser(binary)
    try:
        b.send("Browser.getVersion")
    except (RuntimeError, TimeoutError) as exc:
        b.close()
        pytest.skip(f"{binary} does not start headless here: {exc}")
    yield b
    b.close()
