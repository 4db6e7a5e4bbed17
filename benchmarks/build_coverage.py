"""Which generated models build for TensorRT-RTX as they are, and with `trtconv build --trt rtx`.

Issue 25 Deliver 3: a set of models of the kinds people bring to a converter, generated here
from library configs and constructors with seeded random weights (nothing is downloaded), one
module per family:

- ``transformers``  coverage_transformers.py: Hugging Face encoders as exported, and after ONNX
  Runtime's transformer optimizer (``<name>+ort``)
- ``torchvision``   coverage_torchvision.py: classifiers, segmenters, detectors (exported by the
  interpreter given with ``--torchvision-python``; make one with
  ``python3 -m venv v && v/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx``)
- ``quantized``     coverage_ortquant.py: ONNX Runtime dynamic, static QDQ and QOperator
  quantizations of two transformers and two CNNs (coverage_quantized.py)
- ``dtypes``        coverage_dtypes.py: a uint8 NHWC image input, float64 models
- ``decoders``      coverage_decoders.py: decoder LMs (Llama, Qwen2, GPT-2) with KV-cache inputs and outputs
- ``diffusion``     coverage_diffusion.py: a conditional UNet, a ControlNet, a VAE decoder (``pip install diffusers``)
- ``torch``         coverage_torch.py: plain torch models: GRU, 3-D conv, einsum, timm-style classifiers, a
  length input that sets a shape

Per model (each step a child process with a timeout): its node count, the bare TensorRT-RTX
parser + builder on the file as it is, beside ``trtconv build --trt rtx`` (``--shapes`` for
dynamic inputs; detectors with the split flag where ``trtconv build --help`` lists one), the
rules it applied (rule x count) and the worst proof figure (max |err| / tolerance), and a summary
line. Needs the ``bench`` extra (``pip install -e .[bench]``).

    python benchmarks/build_coverage.py [--out DIR] [--family transformers,dtypes] [--only bert,vit+ort]
        [--torchvision-python v/bin/python] [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import coverage_transformers as ct
from coverage_models import Generated

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("transformers", "torchvision", "quantized", "dtypes", "decoders", "diffusion", "torch")
HEAD = ("family", "model", "nodes", "RTX as is", "trtconv build --trt rtx", "rules applied", "worst proof (err/tol)", "s")


def generators(folder: Path, keep: Callable[[str], bool], python: str | None) -> dict[str, Iterator[Generated]]:
    """Each family's generator, lazily (a family is imported only when it is run)."""
    def lazy(family: str) -> Iterator[Generated]:
        sub = folder / family
        sub.mkdir(parents=True, exist_ok=True)
        if family == "transformers":
            yield from ct.generate(sub, keep)
        elif family == "torchvision":
            import coverage_torchvision as tv
            yield from tv.generate(sub, keep, python)
        elif family == "quantized":
            import coverage_ortquant as oq
            yield from oq.generate(sub, keep, python)
        elif family == "dtypes":
            import coverage_dtypes as cd
            yield from cd.generate(sub, keep, python)
        elif family == "decoders":
            import coverage_decoders as dec
            yield from dec.generate(sub, keep)
        elif family == "diffusion":
            import coverage_diffusion as dif
            yield from dif.generate(sub, keep)
        else:
            import coverage_torch as tor
            yield from tor.generate(sub, keep)
    return {f: lazy(f) for f in FAMILIES}


def dynamic_shapes(path: Path, example: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The example shapes of the inputs whose ONNX shape is not all fixed numbers."""
    import onnx

    out = {}
    for i in onnx.load(str(path), load_external_data=False).graph.input:
        dims = i.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims) and i.name in example:
            out[i.name] = example[i.name]
    return out


def node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def bare_rtx(path: Path, shapes: dict[str, tuple[int, ...]] | None = None, timeout: float = 900.0,
             values: dict[str, tuple[int, ...]] | None = None) -> str:
    from trtconv.trt.realparse import run_isolated

    v = run_isolated(path, "tensorrt_rtx", build=True, shapes=shapes, timeout=timeout, values=values)
    if not v["parsed"]:
        first = v["parser_errors"][0] if v["parser_errors"] else {"op_type": "?", "desc": "?"}
        return f"parse fails: {first['op_type']}: {first['desc'][:70]}"
    return "builds" if v["built"] else f"build fails: {(v['build_errors'] or ['?'])[0][:70]}"


def split_flag() -> str | None:
    """The opt-in split option of ``trtconv build`` (engine + ONNX tail), if this trtconv has one."""
    text = subprocess.run([sys.executable, "-m", "trtconv", "build", "--help"], capture_output=True, text=True,
                          cwd=ROOT).stdout
    found = re.findall(r"--[a-z0-9-]*split[a-z0-9-]*", text)
    return found[0] if found else None


def _proof_ratio(r: dict[str, Any]) -> float | None:
    proof = r.get("proof") or {}
    tol = proof.get("tolerance")
    if not tol:
        return None
    return max((o.get("max_abs", 0.0) for o in proof.get("outputs", [])), default=0.0) / tol


def _said(manifest: dict[str, Any]) -> list[str]:
    """What the manifest records beside the rules: type changes (float64 narrowed) and a split tail."""
    out = [f"{c['rule']}: {c['kind']} {c['name']} {c['before']}->{c['after']}" for c in manifest.get("dtype_changes") or []]
    split = manifest.get("split")
    if split:
        proof = split.get("proof") or {}
        out.append(f"split: engine {split.get('head_nodes', '?')} nodes + ONNX tail {split.get('tail_nodes', '?')} "
                   f"(head + tail vs the model on ONNX Runtime: max abs {proof.get('max_abs', '?')})")
    return out


def trtconv_rtx(path: Path, folder: Path, shapes: dict[str, tuple[int, ...]] | None = None,
                split: str | None = None, timeout: float = 900.0,
                values: dict[str, tuple[int, ...]] | None = None) -> tuple[str, str, str]:
    """(verdict, rules applied, worst proof figure) of ``trtconv build --trt rtx``; ``values``: the
    shape-tensor inputs' values, in ``--shapes`` as ``NAME:[v,...]``."""
    engine = folder / (path.stem + ".engine")
    cmd = [sys.executable, "-m", "trtconv", "build", "--trt", "rtx", str(path), "-o", str(engine), "--json", "--force"]
    items = [f"{k}:{'x'.join(map(str, v)) or 'scalar'}" for k, v in (shapes or {}).items()]
    items += [f"{k}:[{','.join(map(str, v))}]" for k, v in (values or {}).items()]
    if items:
        cmd += ["--shapes", ",".join(items)]
    if split:
        cmd.append(split)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"timeout ({timeout:.0f} s)", "-", "-"
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        last = proc.stderr.strip().splitlines()[-1][:80] if proc.stderr.strip() else ""
        return f"exit {proc.returncode}: {last}", "-", "-"
    rewrites = (doc.get("manifest_data") or {}).get("rewrites") or []
    counts: dict[str, int] = {}
    for r in rewrites:
        counts[r["rule"]] = counts.get(r["rule"], 0) + 1
    rules = ", ".join([f"{k} x{v}" for k, v in sorted(counts.items())] + _said(doc.get("manifest_data") or {})) or "-"
    ratios = [x for x in map(_proof_ratio, rewrites) if x is not None]
    worst = f"{max(ratios):.3f}" if ratios else "-"
    err = doc.get("error")
    first = (err or {}).get("message", "").strip().splitlines()
    verdict = "builds" if err is None else f"exit {err['exit_code']}: {(first[0] if first else '')[:80]}"
    return verdict, rules, worst


def row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(" ".join(c.split()).replace("|", "\\|") for c in cells) + " |"


def measure(g: Generated, folder: Path, split: str | None, timeout: float) -> tuple[str, ...]:
    """One table row for one generated model."""
    if g.path is None:
        return (g.family, g.name, "-", g.error, "-", "-", "-", "-")
    t0 = time.perf_counter()
    shapes = dynamic_shapes(g.path, dict(g.shapes))
    values = dict(g.values)
    bare = bare_rtx(g.path, shapes, timeout, values)
    verdict, rules, worst = trtconv_rtx(g.path, folder, shapes, split if g.detector else None, timeout, values)
    name = g.name + (f" ({split})" if split and g.detector else "")
    return (g.family, name, str(node_count(g.path)), bare, verdict, rules, worst, f"{time.perf_counter() - t0:.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where models and engines go (default: a temp dir)")
    ap.add_argument("--family", default="", help=f"comma-separated families of {', '.join(FAMILIES)}")
    ap.add_argument("--only", default="", help="comma-separated model names (as in the table)")
    ap.add_argument("--torchvision-python", default=None, help="an interpreter with torch, torchvision and onnx")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per child process")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    logging.getLogger().setLevel(logging.ERROR)  # ONNX Runtime's quantizers log advice at WARNING
    warnings.filterwarnings("ignore")  # torch's tracer warnings on every export
    import tensorrt_rtx

    folder = args.out or Path(tempfile.mkdtemp(prefix="build_coverage_"))
    folder.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    families = [f for f in FAMILIES if not args.family or f in args.family.split(",")]
    split = split_flag()
    print(f"TensorRT-RTX {tensorrt_rtx.__version__}; seeded random weights; opset 17; split flag: {split or 'none'}")
    print(row(HEAD))
    print("|" + "---|" * len(HEAD), flush=True)
    rows = []
    for family, gen in generators(folder, lambda n: not only or n in only, args.torchvision_python).items():
        if family not in families:
            continue
        for g in gen:
            rows.append(measure(g, folder / family, split, args.timeout))
            print(row(rows[-1]), flush=True)
    bare = sum(r[3] == "builds" for r in rows)
    built = sum(r[4] == "builds" for r in rows)
    print(f"\n{len(rows)} models; bare TensorRT-RTX builds {bare} as they are; trtconv build --trt rtx builds {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
