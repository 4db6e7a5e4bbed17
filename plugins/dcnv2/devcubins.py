"""Development only: the Hopper kernel's entries as one sm_90a cubin each, for devtiles.py.

Compiles dcnv2_sm90.cu here (nvcc -ptx, optionally with -DDCNV2_DEV for the candidate tiles and
-DDCNV2_DEV_ONLY for them alone), cuts every matching entry into its own module as the plugin
embeds it, and assembles it with ptxas, printing registers, spills and shared memory, so the
device machine compiles nothing:

  python3 plugins/dcnv2/devcubins.py --dev --dev-only --match 'nhwc' .dcnk2/cubin
  python3 plugins/dcnv2/devcubins.py --match '(f16|tf32)_nhwc' .dcnk2/cubin   # the shipped entries
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE)]

from build_ptx import NVCC_FLAGS, nvcc  # noqa: E402

from trtconv.trt.plugins.dcnv2_kernel import single_entry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path, help="folder for <entry>.cubin")
    ap.add_argument("--dev", action="store_true", help="-DDCNV2_DEV: ablations and candidate tiles")
    ap.add_argument("--dev-only", action="store_true", help="-DDCNV2_DEV_ONLY: without the shipped tiles")
    ap.add_argument("--match", default="nhwc", help="regular expression on entry names")
    args = ap.parse_args()
    defines = (["-DDCNV2_DEV"] if args.dev else []) + (["-DDCNV2_DEV_ONLY"] if args.dev_only else [])
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "all.ptx"
        subprocess.run([nvcc(), "-ptx", "-arch=sm_90a", *NVCC_FLAGS, *defines, "-o", str(ptx),
                        str(HERE / "dcnv2_sm90.cu")], check=True)
        text = ptx.read_text()
        for name in re.findall(r"\.visible \.entry (\w+)\(", text):
            if not re.search(args.match, name):
                continue
            one = Path(tmp) / f"{name}.ptx"
            one.write_text(single_entry(text, name))
            res = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(one), "-o", str(args.out / f"{name}.cubin")],
                                 capture_output=True, text=True)
            info = " ".join(ln.split("info    : ")[-1].strip() for ln in res.stderr.splitlines()
                            if "Used" in ln or "spill" in ln)
            print(f"{name}: {'ok' if res.returncode == 0 else 'FAILED'} {info}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
