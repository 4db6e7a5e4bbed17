"""The fast fuzz subset: mutated real models through check, rewrite and quantize.

`make fuzz` runs the same harness over 1000 mutants (tests/fuzz/run.py); here every
(seed model, mutation kind) pair makes one mutant, and each mutant runs through every
command, so a regression in any error path shows up in `make test`.
"""

from __future__ import annotations

import pytest
from fuzz.harness import Case, available_commands, judge, load_seeds, make_cases, run_cases
from fuzz.mutate import ALL_KINDS, DATA_KINDS

from trtconv.errors import ExitCode

# Failures found by the fuzzer in modules still being written, by a signature in the
# failure's traceback; each names its owner. Remove an entry once fixed: a listed
# signature that no longer fails is fine, an unlisted failure is not.
KNOWN_BUGS: dict[str, str] = {}


@pytest.fixture(scope="module")
def seeds():
    return load_seeds()


def test_fuzz_fast_subset(seeds, tmp_path):
    commands = available_commands()
    assert {"check", "rewrite", "quantize-fp16", "quantize-int8"} <= set(commands)
    mutants = len(seeds) * (len(ALL_KINDS) + len(DATA_KINDS))  # every (seed, kind) pair once
    cases = make_cases(mutants, commands, seeds)
    summary = run_cases(cases, seeds, workers=2, time_limit=60.0, work=tmp_path)
    assert len(summary.outcomes) == len(cases) > 3 * mutants
    lines = [f"{o.case} [{o.mutation}]: {o.problem}\n{o.detail}" for o in summary.failures
             if not any(sig in o.detail for sig in KNOWN_BUGS)]
    assert not lines, "\n\n".join(lines)
    codes = summary.by_exit_code()
    # The mutants must reach past the loader, or the subset tests nothing downstream.
    assert codes.get("0", 0) + codes.get("4", 0) + codes.get("5", 0) >= len(cases) // 6, codes
    assert codes.get("3", 0) >= len(cases) // 6, codes


def test_harness_catches_hangs(seeds, tmp_path, monkeypatch):
    """A case over its time limit is killed and reported, and the pool goes on with a fresh worker.
    (The stuck case is the harness's own stand-in: workers fork from this process.)"""
    import time

    from fuzz import harness

    real = harness.run_case

    def stuck_or_real(case, seeds_, work):
        if case.kind == "none":
            time.sleep(60)
        return real(case, seeds_, work)

    monkeypatch.setattr(harness, "run_case", stuck_or_real)
    stuck = Case("cls", "none", 0, "check")
    quick = Case("cls", "truncate", 0, "check")
    # 3 s: the quick case (a truncated model refused at load) must finish inside the limit on a loaded 2-core
    # runner too; 1 s left it a few hundred ms of headroom there.
    summary = run_cases([stuck, quick], seeds, workers=1, time_limit=3.0, work=tmp_path)
    problems = {o.case: o.problem for o in summary.outcomes}
    assert problems[stuck.id] and problems[stuck.id].startswith("hang")
    assert problems[quick.id] is None


@pytest.mark.parametrize(
    ("code", "exc", "stderr", "bad"),
    [
        (0, None, "", False),
        (3, None, "trtconv: error: x is not ONNX\n  hint: re-export\n", False),
        (4, None, "", False),  # check's verdict comes with a report, not an error line
        (1, None, "Traceback (most recent call last):\n", True),
        (3, None, "", True),  # an error exit without saying why
        (3, None, "Traceback (most recent call last):\ntrtconv: error: x\n", True),
        (3, None, "trtconv: error: a\ntrtconv: error: b\n", True),
        (42, None, "trtconv: error: x\n", True),
        (1, ValueError("boom"), "", True),
    ],
)
def test_judge(code, exc, stderr, bad):
    assert (judge(code, exc, stderr) is not None) == bad
    assert int(ExitCode.INTERNAL) == 1
