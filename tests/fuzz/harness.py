"""The fuzz harness: mutants of real models through the real CLI, each under a time limit.

A case is (seed model, mutation kind, case seed, command). Cases run in-process through
click's CliRunner (fast: no interpreter start per case) inside forked worker processes;
the parent kills a worker that overruns its time limit (a hang, even inside C++ code
where signal.alarm cannot reach) or dies (a crash), and starts a fresh one.

A case passes when the command ends with a documented exit code other than INTERNAL,
no exception escaped, stderr holds no traceback and exactly one ``trtconv: error:``
line on failure, and the output folder holds no temp file and no unreadable output.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from fuzz.mutate import ALL_KINDS, DATA_KINDS, Mutant, mutate, mutate_samples, write_mutant  # noqa: E402

# Address-space cap per worker: a mutant that makes trtconv allocate from a declared
# 2**62 dim must fail with a clear error, not take the machine down.
WORKER_MEMORY_BYTES = 12 * 2**30


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes
    shapes: str | None  # --shapes for commands that need static inputs


@dataclass(frozen=True)
class Case:
    seed: str
    kind: str
    case_seed: int
    command: str

    @property
    def id(self) -> str:
        return f"{self.seed}/{self.kind}/{self.case_seed}/{self.command}"


@dataclass
class Outcome:
    case: str
    exit_code: int | None
    problem: str | None  # None when the case passed
    seconds: float
    detail: str = ""
    mutation: str = ""


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.problem]

    def by_exit_code(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in self.outcomes:
            key = "hang/crash" if o.exit_code is None else str(o.exit_code)
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def as_dict(self) -> dict:
        return {
            "cases": len(self.outcomes),
            "failures": [asdict(o) for o in self.failures],
            "exit_codes": self.by_exit_code(),
            "seconds": round(sum(o.seconds for o in self.outcomes), 1),
        }


# --- seeds ------------------------------------------------------------------------------

def _constants_to_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """PP-OCR keeps its weights in Constant nodes; a variant with initializers lets the
    fuzzer damage initializers too (missing, duplicated, wrong dtype, external data)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = []
    for n in out.graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            out.graph.initializer.append(t)
        else:
            keep.append(n)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out


def load_seeds() -> dict[str, Seed]:
    """Real models with real weights: PP-OCR's angle classifier (static input, two
    layouts) and Silero VAD (its network sits in If subgraphs)."""
    from realmodels import rapidocr_model, silero_model

    from trtconv.load import load_model, override_input_shapes

    cls = override_input_shapes(load_model(rapidocr_model("cls")).proto, {"x": (1, 3, 48, 192)})
    return {
        "cls": Seed("cls", cls.SerializeToString(), None),
        "cls_init": Seed("cls_init", _constants_to_initializers(cls).SerializeToString(), None),
        "silero": Seed("silero", silero_model().read_bytes(), "input:1x512,state:2x1x128"),
    }


# --- commands ---------------------------------------------------------------------------

def available_commands() -> list[str]:
    """The fuzzed commands that exist in this tree (others are still being written)."""
    from trtconv.cli.main import COMMANDS

    names = []
    for name in ("check", "rewrite", "quantize-fp16", "quantize-int8", "build"):
        base = name.split("-")[0]
        if base not in COMMANDS:
            continue
        module = COMMANDS[base].partition(":")[0]
        try:
            __import__(module)
        except ImportError:
            continue
        names.append(name)
    return names


def command_args(command: str, model: Path, out_dir: Path, seed: Seed, calib: Path | None) -> list[str]:
    shapes = ["--shapes", seed.shapes] if seed.shapes else []
    if command == "check":
        return ["check", str(model), "--json", *shapes]
    if command == "rewrite":
        return ["rewrite", str(model), "-o", str(out_dir / "out.onnx"), *shapes]
    if command == "quantize-fp16":
        assert calib is not None
        return ["quantize", str(model), "--precision", "fp16", "--calib-data", str(calib),
                "-o", str(out_dir / "out.onnx"), *shapes]
    if command == "quantize-int8":
        assert calib is not None
        return ["quantize", str(model), "--precision", "int8", "--int8-unverified", "--calib-data", str(calib),
                "--calib-method", "minmax", "-o", str(out_dir / "out.onnx"), *shapes]
    if command == "build":  # without TensorRT: check, rewrite, precision, prepared ONNX, then exit 9
        return ["build", str(model), "-o", str(out_dir / "out.engine"), "--no-timing-cache", *shapes]
    raise ValueError(command)


def calibration_folder(seed: Seed, folder: Path) -> Path:
    """A few real-shaped .npy samples for int8 cases (values from a seeded RNG)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        if seed.name == "silero":
            np.savez(folder / f"s{i}.npz", input=rng.standard_normal((1, 512), dtype=np.float32) * 0.1,
                     state=np.zeros((2, 1, 128), np.float32), sr=np.array(16000, np.int64))
        else:
            np.save(folder / f"s{i}.npy", rng.random((1, 3, 48, 192), dtype=np.float32))
    return folder


# --- one case, in-process ---------------------------------------------------------------

# Exit codes that are verdicts with a report rather than errors with a message.
REPORTED_CODES = {4, 5, 7, 8}


def judge(exit_code: int | None, exception: BaseException | None, stderr: str) -> str | None:
    """What is wrong with a finished run, or None."""
    from trtconv.errors import ExitCode

    documented = {int(c) for c in ExitCode}
    if exception is not None and not isinstance(exception, SystemExit):
        return f"exception escaped: {type(exception).__name__}: {str(exception).splitlines()[0] if str(exception) else ''}"
    if exit_code == ExitCode.INTERNAL:
        return "exit 1 (INTERNAL)"
    if exit_code not in documented:
        return f"undocumented exit code {exit_code}"
    if "Traceback (most recent call last)" in stderr:
        return "traceback on stderr"
    errors = [line for line in stderr.splitlines() if line.startswith(("trtconv: error:", "Error:"))]
    if len(errors) > 1:
        return f"{len(errors)} error lines on stderr (want one)"
    if exit_code in REPORTED_CODES:
        return None  # a verdict (check's findings, accuracy numbers), printed as a report
    if exit_code != 0 and len(errors) != 1:
        return "failed without a one-line error on stderr"
    return None


def _check_outputs(out_dir: Path, exit_code: int) -> str | None:
    from trtconv.outputs import TMP_PREFIX

    leftovers = [p.name for p in out_dir.iterdir() if p.name.startswith(TMP_PREFIX)]
    if leftovers:
        return f"temp files left behind: {leftovers}"
    out = out_dir / "out.onnx"
    if out.exists():
        try:
            onnx.load(str(out), load_external_data=False)
        except Exception as exc:
            return f"output {out.name} unreadable after exit {exit_code}: {type(exc).__name__}"
    return None


def run_case(case: Case, seeds: dict[str, Seed], work: Path) -> Outcome:
    """Build the mutant and run one command on it through CliRunner."""
    from click.testing import CliRunner

    from trtconv.cli.main import cli

    seed = seeds[case.seed]
    data_case = case.kind in DATA_KINDS
    mutant = mutate(seed.name, seed.data, "none" if data_case else case.kind, case.case_seed)
    folder = work / f"{case.seed}-{case.kind}-{case.case_seed}-{case.command}"
    shutil.rmtree(folder, ignore_errors=True)
    model = write_mutant(mutant, folder / "in")
    out_dir = folder / "out"
    out_dir.mkdir()
    calib = calibration_folder(seed, folder / "calib") if case.command.startswith("quantize") else None
    if data_case:
        assert calib is not None
        mutant = Mutant(mutant.seed_model, case.kind, mutate_samples(calib, case.kind, case.case_seed), b"")
    args = command_args(case.command, model, out_dir, seed, calib)
    start = time.monotonic()
    result = CliRunner().invoke(cli, args, catch_exceptions=True)
    seconds = time.monotonic() - start
    exc = result.exception
    problem = judge(result.exit_code, exc, result.stderr)
    if problem is None:
        problem = _check_outputs(out_dir, result.exit_code)
    detail = ""
    if problem:
        detail = (result.stderr or "")[-2000:]
        if exc is not None and not isinstance(exc, SystemExit):
            import traceback

            detail = "".join(traceback.format_exception(exc))[-3000:]
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return Outcome(case.id, result.exit_code, problem, round(seconds, 3), detail, mutant.description)


# --- the pool ---------------------------------------------------------------------------

def _worker(conn, seeds: dict[str, Seed], work: Path) -> None:
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # ONNX Runtime logs failures from C++ straight to fd 2; outcomes travel over the pipe.
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    while True:
        case = conn.recv()
        if case is None:
            return
        try:
            outcome = run_case(case, seeds, work)
        except BaseException as exc:  # the harness itself must not die quietly
            outcome = Outcome(case.id, None, f"harness error: {type(exc).__name__}: {exc}", 0.0)
        conn.send(outcome)


class _Slot:
    def __init__(self, ctx, seeds: dict[str, Seed], work: Path) -> None:
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, seeds, work), daemon=True)
        self.proc.start()
        child.close()
        self.case: Case | None = None
        self.started = 0.0

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.parent.close()


def run_cases(
    cases: Iterable[Case],
    seeds: dict[str, Seed],
    *,
    workers: int = 2,
    time_limit: float = 60.0,
    work: Path | None = None,
    on_outcome=None,
) -> Summary:
    """Run ``cases`` over ``workers`` forked processes; a case over ``time_limit`` is a hang."""
    ctx = mp.get_context("fork")
    own_work = work is None
    work = Path(work or tempfile.mkdtemp(prefix="trtconv-fuzz-"))
    todo: Iterator[Case] = iter(cases)
    summary = Summary()
    slots = [_Slot(ctx, seeds, work) for _ in range(workers)]
    try:
        _feed_all(slots, todo)
        while any(s.case for s in slots):
            now = time.monotonic()
            next_deadline = min(s.started + time_limit for s in slots if s.case)
            ready = mp.connection.wait([s.parent for s in slots if s.case],
                                       timeout=max(0.01, min(1.0, next_deadline - now)))
            for s in list(slots):
                if s.case is None:
                    continue
                outcome = None
                if time.monotonic() - s.started > time_limit:
                    outcome = Outcome(s.case.id, None, f"hang: over {time_limit:g} s", time_limit)
                elif s.parent in ready:
                    try:
                        outcome = s.parent.recv()
                    except (EOFError, OSError):
                        outcome = Outcome(s.case.id, None, f"worker crashed (exit {s.proc.exitcode})",
                                          time.monotonic() - s.started)
                if outcome is None:
                    continue
                if not outcome.mutation:
                    seed = seeds[s.case.seed]
                    with contextlib.suppress(Exception):
                        outcome.mutation = mutate(seed.name, seed.data, s.case.kind, s.case.case_seed).description
                summary.outcomes.append(outcome)
                if on_outcome:
                    on_outcome(outcome)
                if outcome.exit_code is None:  # dead or stuck worker: replace it
                    s.stop()
                    idx = slots.index(s)
                    slots[idx] = _Slot(ctx, seeds, work)
                    s = slots[idx]
                s.case = None
                _feed(s, todo)
    finally:
        for s in slots:
            with contextlib.suppress(Exception):
                s.parent.send(None)
            s.stop()
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return summary


def _feed(slot: _Slot, todo: Iterator[Case]) -> None:
    case = next(todo, None)
    if case is not None:
        slot.case = case
        slot.started = time.monotonic()
        slot.parent.send(case)


def _feed_all(slots: list[_Slot], todo: Iterator[Case]) -> None:
    for s in slots:
        _feed(s, todo)


def make_cases(n: int, commands: list[str], seeds: Iterable[str], *, start: int = 0) -> list[Case]:
    """``n`` mutants cycling through seeds x kinds, deterministic; each one runs through
    every command (data mutants through the quantize commands only)."""
    combos = [(s, k) for k in (*ALL_KINDS, *DATA_KINDS) for s in seeds]
    quantize = [c for c in commands if c.startswith("quantize")]
    out = []
    for i in range(start, start + n):
        seed, kind = combos[i % len(combos)]
        for command in quantize if kind in DATA_KINDS else commands:
            out.append(Case(seed, kind, i, command))
    return out
