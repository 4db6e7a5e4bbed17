"""`make fuzz`: run N mutated real models through check, rewrite and quantize.

    python tests/fuzz/run.py --cases 1000 [--workers 2] [--time-limit 60] [--json out.json]

Prints one line per failure as it happens and a summary at the end; exits 1 if any
case failed (a traceback, exit 1, an undocumented exit code, a hang, a crash, a temp
file left behind). A failing case is reproduced with ``--only SEED/KIND/N/COMMAND``;
its mutant is kept under --keep for inspection.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz.harness import Case, available_commands, load_seeds, make_cases, run_cases  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000, help="mutants; each runs through every command")
    ap.add_argument("--start", type=int, default=0, help="first case number (cases are deterministic)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--commands", default=None, help="comma-separated subset of: " + ",".join(available_commands()))
    ap.add_argument("--only", default=None, help="run one case id SEED/KIND/N/COMMAND")
    ap.add_argument("--keep", type=Path, default=None, help="keep failing mutants in this folder")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = ap.parse_args(argv)

    commands = args.commands.split(",") if args.commands else available_commands()
    if not commands:
        print("fuzz: no fuzzable command is registered yet", file=sys.stderr)
        return 1
    seeds = load_seeds()
    if args.only:
        seed, kind, n, command = args.only.split("/")
        cases = [Case(seed, kind, int(n), command)]
    else:
        cases = make_cases(args.cases, commands, seeds, start=args.start)
    print(f"fuzz: {len({(c.seed, c.kind, c.case_seed) for c in cases})} mutants, {len(cases)} runs over "
          f"{', '.join(commands)}; seeds {', '.join(seeds)}; "
          f"{args.workers} workers, {args.time_limit:.0f} s limit", file=sys.stderr)

    done = 0
    t0 = time.monotonic()

    def report(o) -> None:
        nonlocal done
        done += 1
        if o.problem:
            print(f"FAIL {o.case} [{o.mutation}]: {o.problem}", file=sys.stderr)
            if args.only:
                print(o.detail, file=sys.stderr)
        elif done % 100 == 0:
            print(f"fuzz: {done}/{len(cases)} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    summary = run_cases(cases, seeds, workers=args.workers, time_limit=args.time_limit,
                        work=args.keep, on_outcome=report)
    data = summary.as_dict()
    data["wall_seconds"] = round(time.monotonic() - t0, 1)
    data["commands"] = commands
    data["mutants"] = len({(c.seed, c.kind, c.case_seed) for c in cases})
    print(f"fuzz: {data['mutants']} mutants, {data['cases']} runs, {len(summary.failures)} failures, "
          f"{data['wall_seconds']} s wall; exit codes {data['exit_codes']}", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 1 if summary.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
