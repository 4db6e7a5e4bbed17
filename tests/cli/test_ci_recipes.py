"""docs/ci.md's install recipe, run command for command: a wheel built from the checkout,
installed into a fresh virtual environment, whose ``trtconv`` then runs."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_DOC = ROOT / "docs" / "ci.md"
NOT_COPIED = shutil.ignore_patterns(".git", ".cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__",
                                    "build", "dist", "*.egg-info", "*.engine", ".device-in", ".device-out")


def recipe(name: str) -> list[str]:
    """The commands of the ```sh block under ``<!-- ci-recipe: name -->`` (comments dropped)."""
    text = CI_DOC.read_text(encoding="utf-8")
    block = re.search(rf"<!-- ci-recipe: {name} -->\s*```sh\n(.*?)```", text, re.S)
    assert block, f"docs/ci.md has no ci-recipe {name!r} block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_doc_never_installs_from_pypi():
    """trtconv is not on PyPI: no recipe may say `pip install trtconv`."""
    commands = [line for line in CI_DOC.read_text(encoding="utf-8").splitlines()
                if re.search(r"pip install trtconv(\s|$|\[)", line) and "fails" not in line]
    assert commands == []


def see_this_environment(venv: Path) -> None:
    """Let ``venv`` import what the running interpreter imports. ``--system-site-packages`` alone
    gives it the *base* interpreter's packages: run from a virtual environment (the README's
    ``python3 -m venv``), that is not where trtconv's dependencies, pip and setuptools are. A
    ``.pth`` line adds this environment's site-packages after the venv's own (so the installed
    wheel still wins); its ``.pth`` files are not run, so an editable trtconv stays out."""
    (site_dir,) = (venv / "lib").glob("python*/site-packages")
    (site_dir / "_parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")


def test_wheel_recipe_installs_a_working_trtconv(tmp_path):
    src = tmp_path / "trtconv-src"
    shutil.copytree(ROOT, src, ignore=NOT_COPIED)  # the build writes build/ and *.egg-info beside the source
    venv = tmp_path / "venv"
    # trtconv's dependencies are already installed here, so nothing is downloaded (PIP_NO_INDEX);
    # pip and the build backend come from here too, which keeps this quick.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    see_this_environment(venv)
    job = tmp_path / "job"
    job.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", TRTCONV_SRC=str(src), PIP_NO_INDEX="1",
               PIP_NO_BUILD_ISOLATION="0",  # pip reads this as "isolation off": setuptools from the system
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    outputs = []
    for command in recipe("wheel"):
        res = subprocess.run(["bash", "-c", command], cwd=job, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        outputs.append(res.stdout)
    assert outputs[-1].splitlines()[0].startswith("trtconv ")  # `trtconv --version`, the venv's script
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import trtconv; print(trtconv.__file__)"],
                           cwd=job, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel's copy, not the checkout's
    (wheel,) = (job / "dist").glob("trtconv-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("trtconv/analyze/data/trt-10.16.tsv", "trtconv/analyze/data/trt-11.4.tsv",
                 "trtconv/trt/plugins/dcnv2.ptx"):
        assert data in names, f"{data} missing from the wheel"
