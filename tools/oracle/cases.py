"""The oracle's model sets, each a list of :class:`Case` written to a cache folder.

- ``node``: ONNX's own operator test models, regenerated from ``onnx.backend.test.case``
  (the wheel does not ship ``backend/test/data/node``), plus its ``simple`` model cases.
- ``real``: the project's real test models (PP-OCR det/rec/cls, Silero VAD variants).
- ``fuzz``: deterministic mutants of the fuzzer's seeds (tests/fuzz/mutate.py).
- ``rules``: small models written for one rule each (tools/oracle/rulecases.py).
- ``families``: one small model per rewrite family `check` marks rewritable (tools/oracle/familycases.py).
Every set is deterministic: the same onnx version gives the same files.
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]
SETS = ("node", "real", "fuzz", "rules", "families")


@dataclass(frozen=True)
class Case:
    id: str  # "<set>/<name>"
    path: Path
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the build profile (min = opt = max)
    values: dict[str, tuple[int, ...]] = field(default_factory=dict)  # integer inputs' test values
    note: str = ""

    @property
    def set(self) -> str:
        return self.id.split("/", 1)[0]


def _write(folder: Path, name: str, model: onnx.ModelProto | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('/', '_')}.onnx"
    data = model if isinstance(model, bytes) else model.SerializeToString()
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def onnx_node_models() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]]]]:
    """name -> (model, small integer inputs' test values) for ONNX's node and simple model test
    cases (generated in-process, ~4 s). TensorRT needs the values of inputs it uses as shapes."""
    from onnx.backend.test.case import model as model_cases
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        found = list(node_cases.collect_testcases(None)) + list(model_cases.collect_testcases())
    return {c.name: (c.model, _int_values(c)) for c in found if c.model is not None}


def _int_values(case) -> dict[str, tuple[int, ...]]:
    import numpy as np

    out: dict[str, tuple[int, ...]] = {}
    if not case.data_sets:
        return out
    names = [vi.name for vi in case.model.graph.input]
    for name, value in zip(names, case.data_sets[0][0]):
        if not isinstance(value, (np.ndarray, np.generic)):
            continue
        arr = np.asarray(value)
        if arr.dtype.kind in "iu" and arr.ndim <= 1 and arr.size <= 16:
            out[name] = tuple(int(v) for v in arr.reshape(-1))
    return out


def node_cases(cache: Path, names: set[str] | None = None) -> list[Case]:
    out = []
    for name, (model, values) in sorted(onnx_node_models().items()):
        if names is None or name in names:
            out.append(Case(f"node/{name}", _write(cache / "node", name, model), values=values))
    return out


def _parse_shapes(spec: str | None) -> dict[str, tuple[int, ...]]:
    out = {}
    for item in filter(None, (spec or "").split(",")):
        name, _, dims = item.partition(":")
        out[name] = tuple(int(d) for d in dims.split("x"))
    return out


def real_cases(cache: Path) -> list[Case]:
    sys.path.insert(0, str(ROOT / "tests"))
    from realmodels import rapidocr_model, silero_model

    silero_shapes = {"input": (1, 512), "state": (2, 1, 128)}
    out = [
        Case("real/ppocr_det", rapidocr_model("det"), {"x": (1, 3, 640, 640)}),
        Case("real/ppocr_rec", rapidocr_model("rec"), {"x": (1, 3, 48, 320)}),
        Case("real/ppocr_cls_square", rapidocr_model("cls"), {"x": (1, 3, 64, 64)}),
        Case("real/ppocr_cls", rapidocr_model("cls"), {"x": (1, 3, 48, 192)},
             note="H and W share the dim_param '?': a non-square profile contradicts it"),
        Case("real/silero_vad", silero_model(), silero_shapes, note="LSTM inside If branches"),
        Case("real/silero_vad_16k_op15", silero_model("silero_vad_16k_op15.onnx"), silero_shapes),
        Case("real/silero_vad_op18_ifless", silero_model("silero_vad_op18_ifless.onnx"), silero_shapes),
    ]
    return [c for c in out if c.path.is_file()]


def fuzz_cases(cache: Path, count: int = 120) -> list[Case]:
    """``count`` mutants, kinds taken in turn over the seeds; mutants that are not protobufs stay in."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fuzz.harness import load_seeds
    from fuzz.mutate import PROTO_MUTATORS, mutate

    seeds = load_seeds()
    kinds = sorted(PROTO_MUTATORS)
    out = []
    for n in range(count):
        seed = seeds[sorted(seeds)[n % len(seeds)]]
        kind = kinds[(n // len(seeds)) % len(kinds)]
        m = mutate(seed.name, seed.data, kind, n)
        name = f"{seed.name}-{kind}-{n}"
        out.append(Case(f"fuzz/{name}", _write(cache / "fuzz", name, m.data), _parse_shapes(seed.shapes),
                        note=m.description[:200]))
    return out


def rule_cases(cache: Path) -> list[Case]:
    from tools.oracle.rulecases import RULE_MODELS

    out = []
    for name, (model, shapes, note) in sorted(RULE_MODELS().items()):
        out.append(Case(f"rules/{name}", _write(cache / "rules", name, model), dict(shapes), note=note))
    return out


def family_cases(cache: Path) -> list[Case]:
    from tools.oracle.familycases import FAMILY_MODELS

    return [Case(f"families/{name}", _write(cache / "families", name, model), dict(shapes), note=note)
            for name, (model, shapes, note) in sorted(FAMILY_MODELS().items())]


def all_cases(cache: Path, sets: tuple[str, ...] = SETS, fuzz_count: int = 120) -> Iterator[Case]:
    makers = {"node": lambda: node_cases(cache), "real": lambda: real_cases(cache),
              "fuzz": lambda: fuzz_cases(cache, fuzz_count), "rules": lambda: rule_cases(cache),
              "families": lambda: family_cases(cache)}
    for s in sets:
        yield from makers[s]()
