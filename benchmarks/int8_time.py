"""The default INT8 command's time against NVIDIA ModelOpt's INT8 on the same model and data (issue 32, Deliver 4).

Per model (``--models``), the calibration set a user would give: one half of a source-aware split of
benchmarks/gate_data.py's set (``--data``, default the ``--scale 2`` sets: 100-150 samples a half), laid out
*flat* (one folder, each file its own source: the data reaches trtconv's whole path, calibration, the choice,
the gate and the claim, instead of an exit 11 before any work). The other half is *unseen*: no tool reads it.

Each pair runs, in this order, in fresh processes:

- **before**: ``python -m trtconv quantize MODEL --precision int8 --calib-data CAL -o OUT --json`` with
  ``PYTHONPATH=--before`` (an export of the commit to compare with);
- **after**: the same command with ``PYTHONPATH=--after`` (default: this checkout);
- **modelopt**: ModelOpt 0.47's default INT8 (``quantize(..., quantize_mode="int8", calibration_method="entropy",
  calibration_eps=["cpu"])``, FP16 remainder; the FP32 remainder where that fails, as
  benchmarks/int8_gate_truth.py runs it) from ``--modelopt-python``.

Per run: **wall s** (the whole process: interpreter start, imports, load, calibration, trtconv's choices and
gate, writing), **CPU s** (user + system of the process and everything it waited for:
``getrusage(RUSAGE_CHILDREN)`` before and after; the machine is shared, so CPU seconds say more than wall
seconds), the exit code and verdict, trtconv's ``phase_seconds``, the **INT8 share** (Conv/ConvTranspose/MatMul/
Gemm with data and weight through DequantizeLinear, over the FP32 model's: int8_vs_peers.py ``int8_share``) and,
on the unseen half, each sample's worst output cosine against FP32 in ONNX Runtime (graph optimizations off):
the lowest over the unseen half and the share of unseen samples at 0.99 or above. The table gives medians
over the pairs (the accuracy columns do not change between pairs: the commands are deterministic).

    python benchmarks/int8_time.py --before /tmp/main-export --modelopt-python /work/venvs/modelopt/bin/python \
        [--models cls,rec,dddd,yolo,silero16k] [--pairs 3] [--json OUT]
    python benchmarks/int8_time.py --table-from OUT.json [RUN.log ...]   # a saved run, or a run's stderr
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # int8_vs_peers.int8_share reads the model with trtconv.onnxutil

MODELS = ("cls", "rec", "dddd", "yolo", "silero16k")
TOOLS = ("before", "after", "modelopt")


def flat_half(folder: Path, dest: Path, seed: int) -> tuple[Path, list[Path]]:
    """(a flat calibration folder: the calibration half's files linked as SOURCE__NNN.npz, the unseen files)."""
    from int8_gate_truth import source_split, sources_of

    sources = sources_of(folder)
    calib, unseen = source_split({s: len(f) for s, f in sources.items()}, seed)
    dest.mkdir(parents=True)
    for s in calib:
        for f in sources[s]:
            (dest / f"{s}__{f.name}").symlink_to(f.resolve())
    return dest, [f for s in unseen for f in sources[s]]


def timed(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """(the finished process, wall seconds, CPU seconds of it and its descendants)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def run_trtconv(tree: Path, model: str, cal: Path, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "trtconv", "quantize", model, "--precision", "int8", "--calib-data", str(cal),
           "-o", str(out), "--json", "--force", *extra]
    # from the output's folder: ``python -m`` puts the working directory first on sys.path
    proc, wall, cpu = timed(cmd, cwd=out.parent, env={**os.environ, "PYTHONPATH": str(tree)})
    from int8_gate_truth import quantize_report

    doc, int8, error = quantize_report(proc.stdout)
    return {"exit": proc.returncode, "wall": wall, "cpu": cpu, "written": proc.returncode == 0 and out.is_file(),
            "verdict": doc.get("verdict") or int8.get("verdict"), "chosen": int8.get("chosen_method"),
            "phases": int8.get("phase_seconds") or {}, "auto_excluded": len(int8.get("auto_excluded") or []),
            "parts": doc.get("samples_per_part"),
            "message": error.get("message") or (proc.stderr.strip().splitlines() or [""])[-1]}


def run_modelopt(python: str, model: str, cal: Path, out: Path, remainder: str) -> dict:
    child = [python, str(HERE / "int8_gate_truth.py"), "--modelopt-child", model, str(cal), str(out), remainder]
    proc, wall, cpu = timed(child)
    ok = proc.returncode == 0 and out.is_file()
    return {"exit": proc.returncode, "wall": wall, "cpu": cpu, "written": ok, "remainder": remainder,
            "message": "" if ok else (proc.stderr.strip().splitlines() or [""])[-1]}


def accuracy(fp32: str, out: Path, unseen: list[Path], memo: dict) -> dict:
    from int8_gate_truth import share, worst_cosines

    worst = worst_cosines(fp32, str(out), unseen, memo)
    return {"int8_share": share(fp32, str(out)), "worst_unseen": min(worst),
            "unseen_meeting": sum(c >= 0.99 for c in worst) / len(worst)}


def measure(args, name: str, tmp: Path) -> list[dict]:
    import gate_data

    folder = gate_data.ensure(name, args.data, scale=args.data_scale)
    fp32 = json.loads((folder / "meta.json").read_text())["model"]
    cal, unseen = flat_half(folder, tmp / name / "cal", args.seed)
    ncal = len(list(cal.iterdir()))
    memo: dict = {}
    remainder = "fp16"
    rows = []
    for pair in range(args.pairs):
        for tool in args.tools:
            out = tmp / name / f"{tool}{pair}" / "model.onnx"
            out.parent.mkdir(parents=True)
            if tool == "modelopt":
                r = run_modelopt(args.modelopt_python, fp32, cal, out, remainder)
                if not r["written"] and remainder == "fp16":  # as int8_gate_truth.py: FP32 remainder where FP16 fails
                    remainder = "fp32"
                    r = {**run_modelopt(args.modelopt_python, fp32, cal, out, remainder), "fp16_failed": r["message"]}
            else:
                tree = Path(args.before if tool == "before" else args.after)
                r = run_trtconv(tree, fp32, cal, out, args.trtconv_args.split())
            if r["written"]:
                r.update(accuracy(fp32, out, unseen, memo))
            row = {"model": name, "pair": pair, "tool": tool, "calib_samples": ncal, "unseen_samples": len(unseen),
                   **r}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            out.unlink(missing_ok=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | calib / unseen samples | tool | exit, verdict | wall s, median (runs) | CPU s, median | "
             "INT8 share | worst unseen cosine | unseen meeting 0.99 | trtconv phases, median s |",
             "|" + "---|" * 10]
    for name in dict.fromkeys(r["model"] for r in rows):
        for tool in TOOLS:
            rs = [r for r in rows if r["model"] == name and r["tool"] == tool]
            if not rs:
                continue
            last = rs[-1]
            walls = [r["wall"] for r in rs]
            cpus = [r["cpu"] for r in rs]
            label = tool if tool != "modelopt" else f"modelopt ({last.get('remainder', 'fp16')} remainder)"
            said = last.get("verdict") if last["exit"] == 0 else last.get("message")
            verdict = (said or "").split(";")[0][:70]
            phases = {}
            for r in rs:
                for k, v in (r.get("phases") or {}).items():
                    phases.setdefault(k, []).append(v)
            ph = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in phases.items()) or "-"
            acc = ((f"{last['int8_share']:.0%}", f"{last['worst_unseen']:.4f}", f"{last['unseen_meeting']:.1%}")
                   if last.get("written") else ("-", "-", "-"))
            lines.append(f"| {name} | {last['calib_samples']} / {last['unseen_samples']} | {label} | "
                         f"{last['exit']}{', ' + verdict if verdict else ''} | {statistics.median(walls):.1f} "
                         f"({', '.join(f'{w:.0f}' for w in walls)}) | {statistics.median(cpus):.1f} | "
                         f"{acc[0]} | {acc[1]} | {acc[2]} | {ph} |")
    return "\n".join(lines)


def _rows(path: Path) -> list[dict]:
    """A run's rows: its ``--json`` file, or its stderr (one JSON row a line, written as each run ends)."""
    text = path.read_text()
    try:  # the --json file (written indented: its first line is a lone brace)
        return json.loads(text)["rows"]
    except (json.JSONDecodeError, KeyError, TypeError):
        pass
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tools", default=",".join(TOOLS), help="which of before,after,modelopt to run, in this order")
    ap.add_argument("--before", type=Path, help="a tree whose trtconv is the 'before' (an export of main)")
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--modelopt-python", default="/work/venvs/modelopt/bin/python")
    ap.add_argument("--data", type=Path, default=ROOT / ".cache" / "gate_data_x2")
    ap.add_argument("--data-scale", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="the source-aware split's seed")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--trtconv-args", default="", help="more flags for both trtconv commands")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--table-from", type=Path, nargs="*")
    args = ap.parse_args()
    if args.table_from:
        print(table([r for p in args.table_from for r in _rows(p)]))
        return
    args.tools = [t for t in args.tools.split(",") if t]
    if "before" in args.tools and args.before is None:
        ap.error("--before is needed to run 'before' (or --tools after,modelopt)")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="int8_time_") as tmp:
        for name in args.models.split(","):
            rows += measure(args, name, Path(tmp))
            if args.json:
                args.json.write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
