"""Run `trtconv check` and the real TensorRT-RTX parser + CPU-only builder side by side.

    PYTHONPATH=. python tools/oracle/run.py [--sets node,real,fuzz,rules] [--out .cache/oracle]
        [--targets rtx,11.4,10.16] [--timeout 60] [--only REGEX] [--write-sample N] [--rescore OLD.json]

Writes ``oracle.json`` (every case: both verdicts, the reasons, the confusion matrices,
the disagreements, the RTX product-limit cases) and ``oracle.md`` (the same, readable).
``--write-sample N`` also stores a seeded sample of N cases' real verdicts in
``tests/analyze/data/oracle_sample.json`` for the CI test (tests/analyze/test_oracle.py).
``--rescore OLD.json`` keeps an earlier run's real verdicts and predicts again (two trtconv
versions compared with one TensorRT run).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import onnx  # noqa: E402

from tools.oracle.cases import ROOT, SETS, all_cases  # noqa: E402
from tools.oracle.compare import matrix, predict, real_levels, real_reason  # noqa: E402
from tools.oracle.limits import product_limit  # noqa: E402
from tools.oracle.realrun import run_real  # noqa: E402

SAMPLE_FILE = ROOT / "tests" / "analyze" / "data" / "oracle_sample.json"
SAMPLE_SEED = 17


def _limit(path: Path) -> tuple[str, tuple[str, ...]] | None:
    try:
        return product_limit(onnx.load(str(path), load_external_data=False))
    except Exception:
        return None


def _limit_fields(path: Path) -> dict[str, Any]:
    found = _limit(path)
    return {"limit": found[0] if found else None, "limit_levels": list(found[1]) if found else []}


def evaluate(cases, targets: list[str], timeout: float, progress: bool = True) -> list[dict[str, Any]]:
    rows = []
    t0 = time.monotonic()
    for i, (case, real) in enumerate(run_real(cases, timeout=timeout)):
        row = {"id": case.id, "set": case.set, "path": str(case.path), "shapes": {k: list(v) for k, v in
                                                                                   case.shapes.items()},
               "note": case.note, **_limit_fields(case.path), "real": real, "real_levels": real_levels(real),
               "real_reason": real_reason(real), "check": {t: predict(case, t) for t in targets}}
        rows.append(row)
        if progress and (i + 1) % 100 == 0:
            print(f"  {i + 1} cases, {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return rows


def rescore(cases, previous: Path, targets: list[str]) -> list[dict[str, Any]]:
    """The cases of an earlier run (same onnx, same sets: the same files) predicted again by this
    trtconv: the real verdicts do not depend on trtconv, so comparing two trtconv versions needs
    TensorRT only once. Cases the earlier run lacks are run for real."""
    stored = {r["id"]: r for r in json.loads(previous.read_text())["rows"]}
    fresh = [c for c in cases if c.id not in stored]
    rows = {r["id"]: r for r in evaluate(fresh, targets, 60.0, progress=False)} if fresh else {}
    for case in cases:
        if case.id in stored:
            rows[case.id] = {**stored[case.id], **_limit_fields(case.path),
                             "check": {t: predict(case, t) for t in targets}}
    return [rows[c.id] for c in cases]


def disagreements(rows: list[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        c, real = r["check"][target], r["real_levels"]
        levels = [lv for lv in ("parse", "build") if c[lv] != real[lv] and lv not in r["limit_levels"]]
        if levels:
            out.append({"id": r["id"], "levels": levels, "check": c, "real": real, "real_reason": r["real_reason"]})
    return out


def summary(rows: list[dict[str, Any]], targets: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in targets:
        out[t] = {}
        for s in ["all", *sorted({r["set"] for r in rows})]:
            sub = [r for r in rows if s == "all" or r["set"] == s]
            out[t][s] = {lv: matrix(sub, t, lv) for lv in ("parse", "build")}
    return out


def render_md(result: dict[str, Any]) -> str:
    lines = [f"# Oracle: trtconv check vs {result['real_parser']}", "",
             f"{result['cases']} cases ({', '.join(f'{k}: {v}' for k, v in result['per_set'].items())}); "
             f"{len(result['limits'])} cases hit an RTX product limit (listed at the end, left out of the "
             "levels the limit covers).", ""]
    for t, by_set in result["summary"].items():
        lines += [f"## check --trt {t}", "", "| set | level | agree | cases | agreement | cells |", "|---|---|---|---|---|---|"]
        for s, levels in by_set.items():
            for lv, m in levels.items():
                cells = "; ".join(f"{k}: {v}" for k, v in m["cells"].items())
                lines.append(f"| {s} | {lv} | {m['agree']} | {m['cases']} | {m['agreement']} | {cells} |")
        lines.append("")
    target = next(iter(result["summary"]))
    lines += [f"## Disagreements (check --trt {target})", ""]
    for d in result["disagreements"][target]:
        lines.append(f"- `{d['id']}` [{'/'.join(d['levels'])}]: check {d['check']['parse']}/{d['check']['build']} "
                     f"{', '.join(d['check']['errors'])}; real {d['real']['parse']}/{d['real']['build']}: "
                     f"{d['real_reason'][:200]}")
    lines += ["", "## RTX product limits (not counted)", ""]
    for r in result["limits"]:
        lines.append(f"- `{r['id']}` [{'/'.join(r['limit_levels'])} not counted]: {r['limit']}; real {r['real_levels']['parse']}/{r['real_levels']['build']}: "
                     f"{r['real_reason'][:160]}")
    return "\n".join(lines) + "\n"


def write_sample(rows: list[dict[str, Any]], n: int) -> None:
    """A seeded sample of node and rule cases (regenerable without the cache) with their real verdicts."""
    pool = [r for r in rows if r["set"] in ("node", "rules")]
    rng = random.Random(SAMPLE_SEED)
    picked = sorted(rng.sample(pool, min(n, len(pool))), key=lambda r: r["id"])
    data = {"real_parser": rows[0]["real"].get("version") if rows else "", "seed": SAMPLE_SEED,
            "onnx": onnx.__version__,
            "cases": [{"id": r["id"], "shapes": r["shapes"], "limit_levels": r["limit_levels"], **r["real_levels"],
                       "reason": r["real_reason"][:200]} for r in picked]}
    SAMPLE_FILE.parent.mkdir(parents=True, exist_ok=True)
    SAMPLE_FILE.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--targets", default="rtx,11.4,10.16")
    ap.add_argument("--out", type=Path, default=ROOT / ".cache" / "oracle")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only", default=None, help="regex on case ids")
    ap.add_argument("--fuzz-count", type=int, default=120)
    ap.add_argument("--write-sample", type=int, default=0)
    ap.add_argument("--rescore", type=Path, default=None,
                    help="an oracle.json: keep its real verdicts, predict again with this trtconv (no TensorRT run)")
    args = ap.parse_args(argv)
    targets = args.targets.split(",")
    cases = list(all_cases(args.out / "models", tuple(args.sets.split(",")), args.fuzz_count))
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.id)]
    print(f"oracle: {len(cases)} cases", file=sys.stderr)
    rows = rescore(cases, args.rescore, targets) if args.rescore else evaluate(cases, targets, args.timeout)
    per_set: dict[str, int] = {}
    for r in rows:
        per_set[r["set"]] = per_set.get(r["set"], 0) + 1
    result = {"real_parser": next((r["real"]["module"] + " " + r["real"]["version"] for r in rows
                                   if r["real"].get("module")), "?"),
              "cases": len(rows), "per_set": per_set, "summary": summary(rows, targets),
              "disagreements": {t: disagreements(rows, t) for t in targets},
              "limits": [r for r in rows if r["limit"]], "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "oracle.json").write_text(json.dumps(result, indent=1))
    (args.out / "oracle.md").write_text(render_md(result))
    if args.write_sample:
        write_sample(rows, args.write_sample)
    for t in targets:
        a = result["summary"][t]["all"]
        print(f"check --trt {t}: parse {a['parse']['agreement']} ({a['parse']['agree']}/{a['parse']['cases']}), "
              f"build {a['build']['agreement']} ({a['build']['agree']}/{a['build']['cases']})")
    print(f"wrote {args.out / 'oracle.json'} and {args.out / 'oracle.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
