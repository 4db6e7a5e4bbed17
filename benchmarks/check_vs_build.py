"""Does ``trtconv check`` keep its word? Each real test model: check's verdict, then ONE build command.

Issue 26's first "Done when": every model that ``check`` calls supported or rewritable for a
target builds with one ``trtconv build`` command for that target, FP32 and FP16, static and
dynamic; the ones it calls unsupported fail in one step with the reason.

    nice -n 10 python benchmarks/check_vs_build.py [--models ppocr-det,magika] [--trt rtx] [--jobs 1]
        [--json-out results.json]

What is run, each as a fresh ``trtconv`` process (interpreter start-up included), exactly as a user
types it (no ``--force``, no ``--no-preflight``, no other tuning flag):

- ``trtconv check MODEL --trt T --json``: the verdict (``supported`` exit 0, ``needs-rewrite`` exit 4,
  ``unsupported`` exit 5).
- supported / needs-rewrite: ``trtconv build MODEL --trt T --precision fp32|fp16 -o E`` once with a
  static profile (``--shapes``, or nothing when the model has no dynamic dim) and once with a dynamic
  one (``--min-shapes/--opt-shapes/--max-shapes``, only where the model has dynamic dims). Expected: 0.
- unsupported: ``trtconv build MODEL --trt T -o E`` with no shapes at all (a user's first try) and
  with the static ``--shapes``, FP32. Expected: exit 5 at once, the message naming the nodes.

A cell is ``exit code / wall seconds`` of that one command (check's and build's processes, on a shared
machine: wall time, not CPU time); ``seconds`` is the row's total (check + its builds). A row is OK when
every cell has its expected code and no stderr holds a Python traceback; each other cell's first
``error:`` line is listed under the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Case:
    """One real model and the profiles a user would give it (small maxima: RTX builds are CPU work)."""

    id: str
    path: Path
    static: tuple[str, ...]
    dynamic: tuple[str, ...] | None  # None: the model has no dynamic dim


def _dyn(mn: str, opt: str, mx: str) -> tuple[str, ...]:
    return ("--min-shapes", mn, "--opt-shapes", opt, "--max-shapes", mx)


def cases() -> list[Case]:
    """The models the `test` extra installs (tests/realmodels.py), every ONNX file of theirs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from realmodels import ddddocr_model, magika_model, nudenet_model, rapidocr_model, silero_model

    vad = ("input:1x576,state:2x1x128", "input:1x512,state:2x1x128", "input:1x576,state:2x1x128",
           "input:2x576,state:2x2x128")
    vad_static, vad_dyn = ("--shapes", vad[0]), _dyn(*vad[1:])
    return [
        Case("ppocr-det", rapidocr_model("det"), ("--shapes", "x:1x3x320x320"),
             _dyn("x:1x3x64x64", "x:1x3x320x320", "x:2x3x320x320")),
        Case("ppocr-rec", rapidocr_model("rec"), ("--shapes", "x:1x3x48x320"),
             _dyn("x:1x3x48x96", "x:1x3x48x320", "x:2x3x48x320")),
        Case("ppocr-cls", rapidocr_model("cls"), ("--shapes", "x:1x3x48x192"),
             _dyn("x:1x3x48x192", "x:4x3x48x192", "x:8x3x48x192")),
        Case("silero_vad", silero_model("silero_vad.onnx"), vad_static, vad_dyn),
        Case("silero_vad_16k_op15", silero_model("silero_vad_16k_op15.onnx"), vad_static, vad_dyn),
        Case("silero_vad_16k_sequence", silero_model("silero_vad_16k_sequence.onnx"), ("--shapes", "input:1x576"),
             _dyn("input:1x576", "input:2x576", "input:4x576")),
        Case("silero_vad_half", silero_model("silero_vad_half.onnx"), vad_static, vad_dyn),
        Case("silero_vad_op18_ifless", silero_model("silero_vad_op18_ifless.onnx"), vad_static, vad_dyn),
        Case("silero_vad_openvino_16k", silero_model("silero_vad_openvino_16k.onnx"), (), None),
        Case("magika", magika_model(), ("--shapes", "bytes:1x2048"),
             _dyn("bytes:1x2048", "bytes:2x2048", "bytes:4x2048")),
        Case("nudenet-320n", nudenet_model(), ("--shapes", "images:1x3x320x320"),
             _dyn("images:1x3x160x160", "images:1x3x320x320", "images:2x3x320x320")),
        Case("ddddocr-common", ddddocr_model("common.onnx"), ("--shapes", "input1:1x1x64x128"),
             _dyn("input1:1x1x64x64", "input1:1x1x64x128", "input1:1x1x64x256")),
        Case("ddddocr-common_old", ddddocr_model("common_old.onnx"), ("--shapes", "input1:1x1x64x128"),
             _dyn("input1:1x1x64x64", "input1:1x1x64x128", "input1:1x1x64x256")),
        Case("ddddocr-common_det", ddddocr_model("common_det.onnx"), (), None),
    ]


@dataclass(frozen=True)
class Run:
    """One trtconv process: what was typed and what came back."""

    argv: tuple[str, ...]
    code: int
    seconds: float
    error: str  # the first `error:` line (or the traceback's last line), "" when none
    traceback: bool
    stdout: str = field(repr=False, default="")


def trtconv() -> list[str]:
    exe = shutil.which("trtconv")
    return [exe] if exe else [sys.executable, "-m", "trtconv"]


def run(args: list[str]) -> Run:
    t = time.perf_counter()
    try:
        p = subprocess.run([*trtconv(), *args], capture_output=True, text=True, timeout=TIMEOUT_S)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        code, out, err = -1, "", f"error: timed out after {TIMEOUT_S} s"
    seconds = time.perf_counter() - t
    lines = err.splitlines()
    tb = any(line.startswith("Traceback") for line in lines)
    errors = [line for line in lines if "error:" in line]
    first = errors[0] if errors else (lines[-1] if tb and lines else "")
    hint = next((line.strip() for line in lines if line.strip().startswith("hint:")), "")
    if hint:
        first = f"{first} / {hint}"
    return Run(tuple(args), code, seconds, first.strip(), tb, out)


def measure(case: Case, target: str, workdir: Path) -> dict:
    """check, then the builds check's verdict promises (or the refusals it promises)."""
    check = run(["check", str(case.path), "--trt", target, "--json"])
    try:
        verdict = json.loads(check.stdout)["verdict"]
    except (ValueError, KeyError):
        verdict = f"no JSON (exit {check.code})"
    builds: dict[str, Run | None] = {}
    folder = Path(tempfile.mkdtemp(prefix=case.id + "-", dir=workdir))
    base = ["build", str(case.path), "--trt", target]
    if verdict in ("supported", "needs-rewrite"):
        for precision in ("fp32", "fp16"):
            for kind, flags in (("static", case.static), ("dynamic", case.dynamic)):
                key = f"{precision} {kind}"
                if flags is None:
                    builds[key] = None
                    continue
                engine = folder / f"{precision}-{kind}.engine"
                builds[key] = run([*base, "--precision", precision, "-o", str(engine), *flags])
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
    else:
        builds["fp32 no shapes"] = run([*base, "-o", str(folder / "a.engine")])
        builds["fp32 static"] = run([*base, "-o", str(folder / "b.engine"), *case.static])
    shutil.rmtree(folder, ignore_errors=True)
    return {"case": case.id, "model": str(case.path), "verdict": verdict, "check": check, "builds": builds}


def expected(verdict: str) -> int:
    return 0 if verdict in ("supported", "needs-rewrite") else 5


COLUMNS = ("fp32 static", "fp32 dynamic", "fp16 static", "fp16 dynamic")


def cell(r: Run | None) -> str:
    if r is None:
        return "n/a (no dynamic dim)"
    return f"{r.code} / {r.seconds:.0f}" + (" TRACEBACK" if r.traceback else "")


def table(results: list[dict]) -> list[str]:
    head = ("model", "check verdict (exit / s)", *COLUMNS, "seconds", "as promised")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: list[str] = []
    for res in results:
        check, builds, verdict = res["check"], res["builds"], res["verdict"]
        runs = [r for r in builds.values() if r is not None]
        ok = all(r.code == expected(verdict) and not r.traceback for r in runs) and not check.traceback
        if verdict == "unsupported":
            cols = [f"no shapes: {cell(builds['fp32 no shapes'])}", f"--shapes: {cell(builds['fp32 static'])}",
                    "-", "-"]
        else:
            cols = [cell(builds[c]) for c in COLUMNS]
        total = check.seconds + sum(r.seconds for r in runs)
        rows.append(f"| {res['case']} | {verdict} ({check.code} / {check.seconds:.0f}) | " + " | ".join(cols)
                    + f" | {total:.0f} | {'yes' if ok else 'NO'} |")
        for key, r in builds.items():
            if r is not None and (r.code != expected(verdict) or r.traceback or verdict == "unsupported"):
                notes.append(f"- {res['case']}, {key}: exit {r.code}: {r.error or '(no error line)'}")
    return rows + ([""] + notes if notes else [])


def _plain(res: dict) -> dict:
    strip = lambda r: {**asdict(r), "stdout": ""}  # noqa: E731 - check's JSON is long; its verdict is kept
    return {**res, "check": strip(res["check"]),
            "builds": {k: strip(v) if v else None for k, v in res["builds"].items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated case ids (default: all); ids: see cases()")
    ap.add_argument("--trt", default="rtx")
    ap.add_argument("--jobs", type=int, default=1, help="models measured at once (1: timings not disturbed)")
    ap.add_argument("--json-out", type=Path, help="also write every run (argv, exit, seconds, error) as JSON")
    args = ap.parse_args()
    everything = cases()
    wanted = [m for m in args.models.split(",") if m]
    unknown = set(wanted) - {c.id for c in everything}
    if unknown:
        print(f"unknown model id(s) {sorted(unknown)}; known: {[c.id for c in everything]}", file=sys.stderr)
        return 2
    chosen = [c for c in everything if not wanted or c.id in wanted]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: list[dict] = []

    def one(case: Case, tmp: Path) -> dict:
        res = measure(case, args.trt, tmp)
        print("\n".join(table([res])[2:]), file=sys.stderr, flush=True)  # each row as it comes
        results.append(res)
        if args.json_out:
            args.json_out.write_text(json.dumps([_plain(r) for r in results], indent=1))
        return res

    with tempfile.TemporaryDirectory(prefix="check-vs-build-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: one(c, Path(tmp)), chosen))
    print(f"{started}; --trt {args.trt}; load average before/after: {load} / "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; --jobs {args.jobs}\n")
    print("\n".join(table(results)))
    if args.json_out:
        args.json_out.write_text(json.dumps([_plain(r) for r in results], indent=1))
    return 0 if all(line.endswith("yes |") for line in table(results)[2:] if line.startswith("| ")) else 1


if __name__ == "__main__":
    sys.exit(main())
