"""Does the INT8 gate's "passed" hold on data trtconv never saw? (issue 32, Deliver 5)

Per model, on the real sample sets of benchmarks/gate_data.py (60-150 samples, one subfolder per source item:
one typeset document's lines, one photo's crops, one utterance's chunks, one package's files), ``--splits``
seeded random splits that keep each source whole: sources are shuffled and given to the calibration half until
it holds half the samples; the other half is *unseen*. Per split:

1. ``python -m trtconv quantize MODEL --precision int8 --calib-data CAL -o OUT --json``: the default command
   (only ``--json`` added, to read the verdict), in a fresh process, on the calibration half (its subfolders as
   they are), whatever ``trtconv`` that interpreter imports (``PYTHONPATH``). Recorded: exit code, wall time,
   the verdict (``passed`` in the JSON), the layers auto-excluded.
2. Where a model was written: it and the FP32 original run in ONNX Runtime on the CPU (graph optimizations off,
   as the gate runs them) on every unseen sample; per sample the **worst output cosine** (the lowest over the
   model's float outputs of the cosine between INT8 and FP32, the gate's measure; an output of one value per
   sample: its error against its RMS over the unseen samples, on the cosine's scale, as the gate measures it); the share of unseen samples
   at or above 0.99 (``DEFAULT_THRESHOLDS["int8"]``). A pass **holds** when at least 95 % of the unseen samples
   meet 0.99. For models with class scores (a float output shaped [N, C], C > 1: cls, magika) also
   ``unseen_top1``, the share of unseen samples whose arg-max class is FP32's (JSON only).
3. The **INT8 share**: Conv/ConvTranspose/MatMul/Gemm nodes whose data and weight inputs both arrive through a
   DequantizeLinear, over those of the FP32 model (benchmarks/int8_vs_peers.py ``int8_share``).
4. **ModelOpt** (``--modelopt-python``: an interpreter with ``nvidia-modelopt[onnx]==0.47.0``, its own venv:
   it pins onnx and onnxruntime-gpu) on the same calibration half, its default INT8 (``quantize(...,
   quantize_mode="int8", calibration_method="entropy", calibration_eps=["cpu"])``, FP16 remainder; once more with
   an FP32 remainder where that fails), measured the same way on the same unseen half. ModelOpt has no gate:
   its row says what its INT8 does on the unseen half and what it costs. ``--modelopt-from JSON`` reuses the
   ModelOpt rows of an earlier run's ``--json`` for the same splits (keyed by model, split seed and the
   calibration sources): ModelOpt does not change between a before and an after.

Times are each tool's whole process, from start to exit (interpreter start, imports, load, calibration, the
gate for trtconv, writing the model), sequentially, under whatever else the machine runs.

    python benchmarks/int8_gate_truth.py [--models cls,rec,dddd,yolo,silero16k,magika] [--splits 5] [--seed 0]
        [--sources N]   # the many-source sets of gate_data.py --sources N (a pass needs 45 judged sources)
        [--modelopt-python /work/venvs/modelopt/bin/python] [--modelopt-from OLD.json] [--json OUT] [--quick]
    python benchmarks/int8_gate_truth.py --table-from OUT.json [MORE.json] [--models ...]   # tables of saved runs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

THRESHOLD = 0.99  # trtconv.reference.compare.DEFAULT_THRESHOLDS["int8"]: cosine per output
HOLDS = 0.95  # a pass holds when this share of unseen samples meets THRESHOLD
MODELS = ("cls", "rec", "dddd", "yolo", "silero16k", "magika")
QUICK_MODELS = ("cls", "silero16k")


# ----------------------------------------------------------------------------- splits


def source_split(counts: dict[str, int], seed: int, share: float = 0.5) -> tuple[list[str], list[str]]:
    """(calibration sources, unseen sources): ``counts`` (samples per source) shuffled with ``seed``, sources
    given whole to the calibration half until it holds ``share`` of the samples (the source that crosses the
    line goes to whichever half it leaves nearer ``share``). Never splits a source; both halves non-empty
    when there are two sources or more."""
    names = sorted(counts)
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    target = share * sum(counts.values())
    calib: list[str] = []
    n = 0
    for name in order:
        if n >= target:
            break
        if n + counts[name] > target and abs(n + counts[name] - target) > abs(target - n) and calib:
            continue
        calib.append(name)
        n += counts[name]
    if len(calib) == len(names) and len(names) > 1:
        calib.pop()
    unseen = [s for s in order if s not in calib]
    return sorted(calib), sorted(unseen)


def sources_of(folder: Path) -> dict[str, list[Path]]:
    """{source subfolder: its .npz files, sorted}."""
    return {d.name: sorted(d.glob("*.npz")) for d in sorted(folder.iterdir()) if d.is_dir() and not
            d.name.startswith("_") and any(d.glob("*.npz"))}


def calib_folder(root: Path, sources: dict[str, list[Path]], names: list[str]) -> Path:
    """A folder of the calibration half, one subfolder per source (links to the files)."""
    for name in names:
        (root / name).mkdir(parents=True)
        for f in sources[name]:
            (root / name / f.name).symlink_to(f.resolve())
    return root


# ----------------------------------------------------------------------------- measuring


def worst_cosines(fp32_path: str, candidate: str, files: list[Path], memo: dict,
                  top1: list[bool] | None = None) -> list[float]:
    """Per file, the lowest over float outputs of cosine(candidate, FP32), both in ONNX Runtime on the CPU with
    graph optimizations off. ``memo``: FP32 outputs per file, computed once per model. ``top1``: gets, per file
    with class scores (a float output shaped [N, C], C > 1: the gate's own test), whether every row's arg-max
    is FP32's: a cosine of 0.99 can still move a near tie."""
    import onnxruntime as ort

    def session(path: str):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    from trtconv.reference import one_value, one_value_cosines

    ref_sess = None
    sess = session(candidate)
    names = [o.name for o in sess.get_outputs()]
    per: dict[str, list[float]] = {}  # output -> each file's cosine
    pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # output -> each file's (FP32, candidate)
    for f in files:
        feeds = dict(np.load(f))
        if f not in memo:
            ref_sess = ref_sess or session(fp32_path)
            memo[f] = dict(zip([o.name for o in ref_sess.get_outputs()], ref_sess.run(None, feeds)))
        got = dict(zip(names, sess.run(None, feeds)))
        agree = []
        for k, ref in memo[f].items():
            if np.asarray(ref).dtype.kind != "f" or k not in got:
                continue
            if np.ndim(ref) == 2 and np.shape(ref)[1] > 1:
                agree.append(bool(np.array_equal(np.argmax(ref, 1), np.argmax(got[k], 1))))
            a = np.asarray(ref, np.float64).ravel()
            b = np.asarray(got[k], np.float64).ravel()
            pairs.setdefault(k, []).append((a, b))
            if not np.all(np.isfinite(b)):
                per.setdefault(k, []).append(0.0)
                continue
            na, nb = np.linalg.norm(a), np.linalg.norm(b)
            per.setdefault(k, []).append(1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na and nb else 0.0)
        if top1 is not None and agree:
            top1.append(all(agree))
    for k, ab in pairs.items():  # one value per sample: the gate's measure, the error against the output's RMS
        if one_value(a.size for a, _ in ab):
            errors = [float(abs(b[0] - a[0])) if a.size and np.isfinite(b[0]) else (float("inf") if a.size else 0.0)
                      for a, b in ab]
            per[k] = list(one_value_cosines(errors, [float(a[0]) for a, _ in ab if a.size])[1])
    return [min(c[i] for c in per.values()) for i in range(len(files))] if per else [1.0] * len(files)


def unseen_stats(worst: list[float], top1: list[bool] | None = None) -> dict:
    meet = sum(c >= THRESHOLD for c in worst) / len(worst)
    stats = {"unseen": len(worst), "unseen_meeting": meet, "worst_unseen": min(worst), "holds": meet >= HOLDS}
    if top1:
        stats["unseen_top1"] = sum(top1) / len(top1)
    return stats


def share(fp32_path: str, candidate: str) -> float:
    import onnx
    from int8_vs_peers import int8_share

    q, total = int8_share(onnx.load(fp32_path), onnx.load(candidate))
    return q / total if total else 0.0


def quantize_report(stdout: str) -> tuple[dict, dict, dict]:
    """``trtconv quantize --json``'s report: (the document, its ``int8`` part, its ``error``); empty where the
    process printed no JSON (a crash)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = {}
    return doc, doc.get("int8") or {}, doc.get("error") or {}


def run_trtconv(model: str, cal: Path, out: Path, extra: Sequence[str] = ()) -> dict:
    """The default command (with ``extra`` flags, ``--trtconv-args``) in a fresh process; its exit code, wall
    time and the verdict from ``--json``."""
    cmd = [sys.executable, "-m", "trtconv", "quantize", model, "--precision", "int8", "--calib-data", str(cal),
           "-o", str(out), "--json", *extra]
    t0 = time.perf_counter()
    # run from the split's folder: ``python -m`` puts the working directory first on sys.path, and a checkout
    # there would win over PYTHONPATH
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    row = {"exit": proc.returncode, "seconds": time.perf_counter() - t0, "trtconv": _trtconv_file(out.parent)}
    doc, int8, error = quantize_report(proc.stdout)
    row.update({"passed": doc.get("passed"), "verdict": doc.get("verdict") or int8.get("verdict"),
                "held_out": doc.get("held_out_samples") or int8.get("held_out_samples"),
                "auto_excluded": len(int8.get("auto_excluded") or []), "written": out.is_file(),
                "message": error.get("message") or (_last_line(proc.stderr) if proc.returncode else ""),
                "json_keys": sorted(k for k in doc if k not in ("int8", "fp16", "accuracy", "samples"))})
    for key in ("unverified", "claim", "samples_per_part", "share_needed_below"):
        if key in doc:
            row[key] = doc[key]
    row["refused"] = proc.returncode in (7, 8) or (proc.returncode == 11 and "not verified" in row["message"])
    return row


def _trtconv_file(cwd: Path) -> str:
    """Which trtconv the command imports (from ``cwd``, with this environment)."""
    proc = subprocess.run([sys.executable, "-c", "import trtconv; print(trtconv.__file__)"], capture_output=True,
                          text=True, cwd=cwd)
    return proc.stdout.strip()


def run_modelopt(python: str, model: str, cal: Path, out: Path) -> dict:
    """ModelOpt's default INT8 in a fresh process of its own interpreter; FP32 remainder where FP16 fails."""
    row: dict = {}
    for rest in ("fp16", "fp32"):
        t0 = time.perf_counter()
        proc = subprocess.run([python, __file__, "--modelopt-child", model, str(cal), str(out), rest],
                              capture_output=True, text=True)
        row = {"seconds": time.perf_counter() - t0, "remainder": rest, "written": out.is_file(),
               "error": "" if proc.returncode == 0 and out.is_file() else _last_line(proc.stderr)}
        last = proc.stdout.strip().splitlines()[-1:] or ["{}"]
        if last[0].startswith("{"):
            row.update(json.loads(last[0]))
        if not row["error"]:
            break
    return row


def modelopt_child(model: str, cal: str, out: str, rest: str) -> None:
    """Runs under ModelOpt's interpreter: its ONNX PTQ on the samples under ``cal`` (every .npz, any depth)."""
    t0 = time.perf_counter()
    from modelopt.onnx.quantization import quantize
    from modelopt_reader import data_reader  # benchmarks/ (this script's folder)

    samples = [dict(np.load(f)) for f in sorted(Path(cal).rglob("*.npz"))]

    t1 = time.perf_counter()
    quantize(model, quantize_mode="int8", calibration_method="entropy", calibration_data_reader=data_reader(samples),
             calibration_eps=["cpu"], output_path=out, log_level="ERROR", high_precision_dtype=rest)
    print(json.dumps({"call_seconds": time.perf_counter() - t1, "import_seconds": t1 - t0}))


# ----------------------------------------------------------------------------- driver


def split_key(model: str, seed: int, calib: list[str], total: int) -> str:
    return hashlib.sha256(json.dumps([model, seed, calib, total]).encode()).hexdigest()[:16]


def measure_model(args, name: str, tmp: Path, reuse: dict) -> list[dict]:
    import gate_data

    folder = gate_data.ensure(name, args.data or gate_data.default_out(args.sources), scale=args.data_scale,
                              sources=args.sources)
    meta = json.loads((folder / "meta.json").read_text())
    sources = sources_of(folder)
    total = sum(len(v) for v in sources.values())
    if total < 60:
        print(f"{name}: {total} samples, fewer than 60: skipped", file=sys.stderr)
        return []
    memo: dict = {}
    rows = []
    for k in range(args.splits):
        seed = args.seed * 1000 + k
        calib, unseen = source_split({s: len(f) for s, f in sources.items()}, seed)
        work = tmp / name / f"split{k}"
        cal = calib_folder(work / "cal", sources, calib)
        unseen_files = [f for s in unseen for f in sources[s]]
        row = {"model": name, "split": k, "seed": seed, "samples": total, "sources": len(sources),
               "calib_samples": sum(len(sources[s]) for s in calib), "calib_sources": calib,
               "unseen_samples": len(unseen_files), "key": split_key(name, seed, calib, total)}
        out = work / "trtconv.onnx"
        t = run_trtconv(meta["model"], cal, out, shlex.split(args.trtconv_args))
        if args.trtconv_args:
            t["flags"] = args.trtconv_args
        if t["written"]:
            agree: list[bool] = []
            t.update(unseen_stats(worst_cosines(meta["model"], str(out), unseen_files, memo, agree), agree))
            t["int8_share"] = share(meta["model"], str(out))
        row["trtconv"] = t
        if args.modelopt_python or row["key"] in reuse:
            if row["key"] in reuse:
                row["modelopt"] = {**reuse[row["key"]], "reused": True}
            else:
                mo_out = work / "modelopt.onnx"
                m = run_modelopt(args.modelopt_python, meta["model"], cal, mo_out)
                if m["written"] and not m["error"]:
                    agree = []
                    m.update(unseen_stats(worst_cosines(meta["model"], str(mo_out), unseen_files, memo, agree), agree))
                    m["int8_share"] = share(meta["model"], str(mo_out))
                row["modelopt"] = m
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if args.json:
            _save(args.json, rows, args)
    return rows


def _save(path: Path, rows: list[dict], args) -> None:
    done = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    keys = {(r["model"], r["key"]) for r in rows}
    kept = [r for r in done.get("rows", []) if (r["model"], r["key"]) not in keys]
    path.write_text(json.dumps({"argv": sys.argv[1:], "rows": kept + rows}, indent=1))


def summary(rows: list[dict]) -> str:
    """One line per model: what the gate said over the splits and what held on the unseen halves."""
    lines = ["| model | samples (sources) | splits | trtconv passed | passes holding on unseen | refused "
             "(exit codes) | other | INT8 share, median | unseen meeting 0.99: median (lowest) | worst unseen "
             "cosine | trtconv s, median | ModelOpt s, median | ModelOpt unseen meeting 0.99: median (lowest) "
             "| ModelOpt worst unseen | ModelOpt INT8 share |", "|" + "---|" * 15]
    for name, size in dict.fromkeys((r["model"], r["samples"]) for r in rows):  # one row per model and set
        rs = [r for r in rows if (r["model"], r["samples"]) == (name, size)]
        t = [r["trtconv"] for r in rs]
        passed = [x for x in t if x["exit"] == 0 and x.get("passed") is True]
        holding = [x for x in passed if x.get("holds")]
        refused = [x for x in t if x.get("refused", x["exit"] in (7, 8))]
        other = [x for x in t if x not in passed and x not in refused]
        written = [x for x in t if "unseen_meeting" in x]
        codes = ", ".join(f"{c} ×{sum(x['exit'] == c for x in refused)}" for c in sorted({x["exit"] for x in refused}))
        mo = [r["modelopt"] for r in rs if "modelopt" in r]
        mo_ok = [m for m in mo if "unseen_meeting" in m]
        lines.append(
            f"| {name} | {rs[0]['samples']} ({rs[0]['sources']}) | {len(rs)} | {len(passed)}/{len(rs)} | "
            f"{_frac(len(holding), len(passed))} | {len(refused)}{f' ({codes})' if refused else ''} | "
            f"{_other(other)} | {_med([x['int8_share'] for x in written], '.0%')} | "
            f"{_med([x['unseen_meeting'] for x in written], '.1%')} "
            f"({_min([x['unseen_meeting'] for x in written], '.1%')}) | "
            f"{_min([x['worst_unseen'] for x in written], '.3f')} | {_med([x['seconds'] for x in t], '.0f')} | "
            f"{_med([m['seconds'] for m in mo], '.0f') if mo else 'not run'} | "
            f"{_med([m['unseen_meeting'] for m in mo_ok], '.1%')} ({_min([m['unseen_meeting'] for m in mo_ok], '.1%')}) | "
            f"{_min([m['worst_unseen'] for m in mo_ok], '.3f')} | {_med([m['int8_share'] for m in mo_ok], '.0%')} |")
    return "\n".join(lines)


def detail(rows: list[dict]) -> str:
    """One line per split."""
    lines = ["| model | split seed | calib / unseen samples | trtconv exit | verdict | INT8 share | unseen meeting 0.99 "
             "| worst unseen | holds | trtconv s | ModelOpt s | ModelOpt unseen meeting 0.99 | ModelOpt worst |",
             "|" + "---|" * 13]
    for r in rows:
        t, m = r["trtconv"], r.get("modelopt", {})
        verdict = _short(((t.get("message") if t["exit"] else t.get("verdict")) or "").replace("|", "/"))
        lines.append(
            f"| {r['model']} | {r['seed']} | {r['calib_samples']} / {r['unseen_samples']} | {t['exit']} | {verdict} | "
            f"{_fmt(t.get('int8_share') if 'unseen_meeting' in t else None, '.0%')} | "
            f"{_fmt(t.get('unseen_meeting'), '.1%')} | "
            f"{_fmt(t.get('worst_unseen'), '.3f')} | {'-' if 'holds' not in t else 'yes' if t['holds'] else 'no'} | "
            f"{t['seconds']:.0f} | {_fmt(m.get('seconds'), '.0f')} | {_fmt(m.get('unseen_meeting'), '.1%')} | "
            f"{_fmt(m.get('worst_unseen'), '.3f')} |")
    return "\n".join(lines)


def _short(text: str) -> str:
    """The verdict or refusal in a table cell: the claim's numbers kept, the advice dropped."""
    import re

    m = re.match(r"INT8 not verified: (\d+) independent judged samples \((\d+) samples from (\d+) sources.*?design "
                 r"effect ([\d.]+)\)(?:, (\d+) of them below the limit)?", text)
    if m:
        judged, samples, sources, deff, misses = m.groups()
        return (f"not verified: {judged} judged ({samples} samples, {sources} sources, design effect {deff}), "
                f"{misses or 0} below 0.99")
    m = re.match(r"passed on n=(\d+) judged samples: at least ([\d.]+%)", text)
    if m:
        return f"passed on n={m.group(1)}: at least {m.group(2)} of new samples"
    return text[:90]


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _med(xs: list[float], spec: str) -> str:
    return _fmt(statistics.median(xs) if xs else None, spec)


def _min(xs: list[float], spec: str) -> str:
    return _fmt(min(xs) if xs else None, spec)


def _frac(a: int, b: int) -> str:
    return "-" if b == 0 else f"{a}/{b} ({a / b:.0%})"


def _other(xs: list[dict]) -> str:
    if not xs:
        return "0"
    kinds = {}
    for x in xs:
        label = f"exit {x['exit']}" + (", written" if x["written"] else "")
        kinds[label] = kinds.get(label, 0) + 1
    return "; ".join(f"{n}× {k}" for k, n in kinds.items())


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help=f"default {','.join(MODELS)} ({','.join(QUICK_MODELS)} with --quick)")
    ap.add_argument("--splits", type=int, default=None, help="random source-aware splits per model (default 5; 2 with --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=None, help="default .cache/gate_data (_sN with --sources N)")
    ap.add_argument("--sources", type=int, default=0,
                    help="gate_data.py --sources: the many-source sets (N sources of 1-2 samples each)")
    ap.add_argument("--data-scale", type=int, default=1, help="gate_data.py --scale: k times the samples per source")
    ap.add_argument("--modelopt-python", default=None,
                    help="interpreter with nvidia-modelopt[onnx]==0.47.0 (its own venv); without it no ModelOpt column")
    ap.add_argument("--modelopt-from", type=Path, nargs="+", help="reuse ModelOpt rows of earlier --json files for the same splits")
    ap.add_argument("--trtconv-args", default="", help="more flags for trtconv's command (e.g. "
                    "'--min-precision-share 0': auto-exclude may go as deep as passing needs)")
    ap.add_argument("--json", type=Path, help="write every row here (rows of other models/splits already there are kept)")
    ap.add_argument("--quick", action="store_true", help="2 splits of the two fastest models")
    ap.add_argument("--table-from", type=Path, nargs="+", help="print the tables of earlier --json files; run nothing")
    ap.add_argument("--modelopt-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.modelopt_child:
        modelopt_child(*args.modelopt_child)
        return
    if args.table_from:
        rows = [r for f in args.table_from for r in json.loads(f.read_text())["rows"]]
        if args.models:
            rows = [r for r in rows if r["model"] in args.models.split(",")]
        print(summary(rows) + "\n\n" + detail(rows))
        return
    args.models = args.models or ",".join(QUICK_MODELS if args.quick else MODELS)
    args.splits = args.splits or (2 if args.quick else 5)
    reuse = {}
    if args.modelopt_from:
        reuse = {split_key(r["model"], r["seed"], r["calib_sources"], r["samples"]): r["modelopt"]
                 for f in args.modelopt_from for r in json.loads(f.read_text())["rows"]
                 if "modelopt" in r and not r["modelopt"].get("error")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows += measure_model(args, name, Path(tmp), reuse)
    print(summary(rows))
    print()
    print(detail(rows))


if __name__ == "__main__":
    main()
