"""The real ONNX parser (and, for TensorRT-RTX, a CPU-only build) as a yes/no answer with reasons.

``check`` predicts from tables; this asks the parser itself. The oracle harness
(tools/oracle) runs it in a subprocess per batch of models, because a builder can abort
the process. Which TensorRT is used is a parameter: ``tensorrt_rtx`` builds without a
GPU, ``tensorrt`` 10/11 only parse here (their builder needs one).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

RTX_MODULE = "tensorrt_rtx"
MODULES = (RTX_MODULE, "tensorrt")


@dataclass(frozen=True)
class ParserError:
    """One error of ``OnnxParser``: which node (index in the top graph, -1 = none), and why."""

    node: int
    node_name: str
    op_type: str
    desc: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "node_name": self.node_name, "op_type": self.op_type, "desc": self.desc}


@dataclass(frozen=True)
class RealVerdict:
    """What the real parser (and builder) said about one model."""

    module: str
    version: str
    parsed: bool
    parser_errors: tuple[ParserError, ...] = ()
    built: bool | None = None  # None: not attempted (parse failed, or build not asked for)
    build_errors: tuple[str, ...] = ()
    logs: tuple[str, ...] = field(default=(), compare=False)  # other error lines the logger printed

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "version": self.version, "parsed": self.parsed,
                "parser_errors": [e.to_json() for e in self.parser_errors], "built": self.built,
                "build_errors": list(self.build_errors), "logs": list(self.logs)}


def import_tensorrt(module: str | None = None) -> Any:
    """The first importable TensorRT among ``MODULES`` (or exactly ``module``); None if none."""
    for name in (module,) if module else MODULES:
        try:
            return importlib.import_module(name)
        except Exception:  # ImportError, or OSError from a missing native library
            continue
    return None


def target_module(target: str) -> str | None:
    """The module holding ``target``'s own parser (a ``--trt`` value), where it imports here: TensorRT-RTX
    for ``rtx``, TensorRT of the target's major version for ``10.16``/``11.4``; None where it does not
    (the build then goes by ``check``'s prediction). Imports it: call it only where the answer matters."""
    module = RTX_MODULE if target == "rtx" else "tensorrt"
    trt = import_tensorrt(module)
    if trt is None:
        return None
    if module == RTX_MODULE:
        return module
    return module if str(getattr(trt, "__version__", "")).split(".")[0] == target.split(".")[0] else None


def _logger(trt: Any, sink: list[str]) -> Any:
    class Collect(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.ERROR, trt.ILogger.INTERNAL_ERROR):
                sink.append(str(msg).strip())

    return Collect()


# One input's profile: its shape (min = opt = max), or {"min": ..., "opt": ..., "max": ...}.
ShapeOrRange = Sequence[int] | Mapping[str, Sequence[int]]


Corners = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _corners(given: ShapeOrRange) -> Corners:
    """(min, opt, max) of a shape (or a shape-tensor input's values) or of a min/opt/max range."""
    if isinstance(given, Mapping):
        lo, mid, hi = (tuple(int(d) for d in given[k]) for k in ("min", "opt", "max"))
        return lo, mid, hi
    want = tuple(int(d) for d in given)
    return want, want, want


def _profile_dims(dims: Sequence[int], name: str, shapes: Mapping[str, ShapeOrRange]) -> Corners:
    """(min, opt, max) of one input: as given, else its fixed dims with the dynamic ones set to 1."""
    given = shapes.get(name)
    return _corners(given if given is not None else tuple(1 if d < 0 else int(d) for d in dims))


def _json_ranges(given: Mapping[str, ShapeOrRange] | None) -> str:
    return json.dumps({k: {c: list(r) for c, r in v.items()} if isinstance(v, Mapping) else list(v)
                       for k, v in (given or {}).items()})


def parse_and_build(path: Path, trt: Any, *, build: bool = True,
                    shapes: Mapping[str, ShapeOrRange] | None = None,
                    values: Mapping[str, ShapeOrRange] | None = None,
                    on_parsed: Callable[[RealVerdict], None] | None = None) -> RealVerdict:
    """Parse ``path`` with ``trt``'s OnnxParser; if it parses and ``build``, build it with one
    profile (``shapes`` per input, a shape or a min/opt/max range, other dynamic dims set to 1; ``values``,
    likewise, for shape-tensor inputs, which need values rather than dims). Never raises for a bad model.
    ``on_parsed`` hears the parse verdict before the build starts (a build can abort the process)."""
    logs: list[str] = []
    logger = _logger(trt, logs)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    try:
        ok = bool(parser.parse_from_file(str(path)))
    except Exception as exc:  # pybind errors on malformed files
        ok = False
        logs.append(f"{type(exc).__name__}: {exc}")
    errors = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        errors.append(ParserError(int(e.node()), str(e.node_name()), str(e.node_operator()), str(e.desc())))
    version = str(getattr(trt, "__version__", "?"))
    module = str(trt.__name__)
    if not ok or errors:
        return RealVerdict(module, version, False, tuple(errors), None, (), tuple(logs))
    if not build:
        return RealVerdict(module, version, True, (), None, (), tuple(logs))
    parse_logs = len(logs)
    if on_parsed is not None:
        on_parsed(RealVerdict(module, version, True, (), None, (), tuple(logs)))
    config = builder.create_builder_config()
    profile = None
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims = tuple(t.shape)
        if t.is_shape_tensor or any(d < 0 for d in dims):
            profile = profile or builder.create_optimization_profile()
            lo, mid, hi = _profile_dims(dims, t.name, shapes or {})
            if any(d < 0 for d in dims):
                profile.set_shape(t.name, lo, mid, hi)
            if t.is_shape_tensor and values and t.name in values:
                profile.set_shape_input(t.name, *_corners(values[t.name]))  # without values: the builder's error
    if profile is not None:
        config.add_optimization_profile(profile)
    try:
        engine = builder.build_serialized_network(network, config)
    except Exception as exc:
        engine = None
        logs.append(f"{type(exc).__name__}: {exc}")
    built = engine is not None
    return RealVerdict(module, version, True, (), built, tuple(logs[parse_logs:]) if not built else (),
                       tuple(logs[:parse_logs]))


def aborted_verdict(parsed: Mapping[str, Any] | None, how: str, detail: object) -> dict[str, Any]:
    """The JSON verdict of a run whose process died or hung: at the build if it had parsed, else at the parse."""
    note = f"{how} ({detail})"
    if parsed is not None:
        return {**parsed, "built": False, "build_errors": [f"builder {note}"], "aborted": how}
    return {"module": "", "version": "", "parsed": False, "built": None, "build_errors": [], "logs": [],
            "parser_errors": [{"node": -1, "node_name": "", "op_type": "", "desc": f"parser {note}"}],
            "aborted": how}


def run_isolated(path: Path, module: str, *, build: bool, shapes: Mapping[str, ShapeOrRange] | None = None,
                 timeout: float = 600.0, values: Mapping[str, ShapeOrRange] | None = None) -> dict[str, Any]:
    """``parse_and_build`` in a child process (``python -m trtconv.trt.realparse``): a builder
    that aborts or hangs costs that process only. Returns the verdict's JSON form."""
    cmd = [sys.executable, "-m", "trtconv.trt.realparse", str(path), "--module", module,
           "--shapes", _json_ranges(shapes), "--values", _json_ranges(values)] + (["--build"] if build else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, how, detail = proc.stdout, "crash", f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        how, detail = "timeout", f"{timeout:.0f} s"
    parsed: dict[str, Any] | None = None
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("phase") == "done":
            return dict(msg["real"])
        if msg.get("phase") == "parsed":
            parsed = msg["real"]
    return aborted_verdict(parsed, how, detail)


def json_stream() -> TextIO:
    """A private copy of stdout for JSON lines; fd 1 itself then goes to stderr, so what the native
    libraries print (cudaError lines, at times without a newline) cannot corrupt the protocol."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trtconv.trt.realparse MODEL --module M [--build] [--shapes JSON] [--values JSON]``: JSON lines."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model", type=Path)
    ap.add_argument("--module", default=RTX_MODULE, choices=MODULES)
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--shapes", default="{}")
    ap.add_argument("--values", default="{}", help="shape-tensor inputs' values, JSON")
    args = ap.parse_args(argv)
    trt = import_tensorrt(args.module)
    if trt is None:
        print(f"{args.module} is not importable", file=sys.stderr)
        return 9
    out = json_stream()

    def emit(phase: str, verdict: RealVerdict) -> None:
        print(json.dumps({"phase": phase, "real": verdict.to_json()}), file=out, flush=True)

    verdict = parse_and_build(args.model, trt, build=args.build, shapes=json.loads(args.shapes),
                              values=json.loads(args.values), on_parsed=lambda v: emit("parsed", v))
    emit("done", verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
