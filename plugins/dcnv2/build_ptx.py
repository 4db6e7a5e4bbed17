"""Compile the DCNv2 kernels to the PTX that trtconv ships.

dcnv2.cu -> dcnv2.ptx (compute_80: Ampere and later); dcnv2_sm90.cu -> dcnv2_sm90a.ptx
(compute_90a: the wgmma kernel, Hopper only).

`make dcnv2-ptx` runs this; tests/trt/test_dcnv2_build.py runs the same compile and checks the
shipped files match, so a kernel that does not build -- or PTX that is stale -- cannot land.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PACKAGE_DIR = ROOT / "trtconv" / "trt" / "plugins"
# target architecture -> (source, shipped PTX)
TARGETS = {
    "sm_80": (HERE / "dcnv2.cu", PACKAGE_DIR / "dcnv2.ptx"),
    "sm_90a": (HERE / "dcnv2_sm90.cu", PACKAGE_DIR / "dcnv2_sm90a.ptx"),
}
NVCC_FLAGS = ("-std=c++17", "-O3")


def nvcc() -> str:
    found = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
    if not found:
        raise FileNotFoundError("nvcc not found: install the CUDA toolkit (13.0 is what trtconv ships PTX from)")
    return found


def compile_ptx(arch: str, out: Path) -> None:
    """nvcc -ptx for one virtual architecture, e.g. 'sm_80'."""
    cmd = [nvcc(), "-ptx", f"-arch={arch}", *NVCC_FLAGS, "-o", str(out), str(TARGETS[arch][0])]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")


def ptx_body(text: str) -> list[str]:
    """PTX without its '//' comment lines (the header names the exact nvcc build)."""
    return [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for arch, (_, shipped) in TARGETS.items():
            out = Path(tmp) / shipped.name
            compile_ptx(arch, out)
            shutil.copyfile(out, shipped)
            print(f"wrote {shipped.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
