"""ONNX Runtime's quantizers applied to a float model: the quantized variants of the coverage benchmark.

Issue 25 Deliver 3 (quantized part). :func:`quantized_variants` runs, on one float ONNX model, what
users run on theirs: ``quantize_dynamic`` (per tensor and per channel), ``quantize_static`` in the
QDQ and the QOperator formats (int8 activations per channel; uint8 activations per tensor with
``reduce_range``; QDQ with 16-bit activations), and ``MatMulNBitsQuantizer`` (4-bit blocked weights, as ``com.microsoft::MatMulNBits``
and as int4 ``DequantizeLinear`` + ``MatMul``). ``benchmarks/build_coverage.py`` adds a row per variant.

Its table is the coverage benchmark's quantized family:

    python benchmarks/build_coverage.py --family quantized [--only bert.qdq,resnet18.dyn]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
W4_BLOCK = 32  # the generated models are small (hidden 64): ONNX Runtime's default 128 would cover no MatMul


def _reader(calib_inputs: list[dict[str, np.ndarray]]) -> Any:
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calib_inputs)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

        def rewind(self) -> None:
            self.it = iter(calib_inputs)

    return Reader()


def _dynamic(per_channel: bool) -> Callable[[Path, Path, list[dict[str, np.ndarray]]], None]:
    def make(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        from onnxruntime.quantization import quantize_dynamic

        quantize_dynamic(str(src), str(dst), per_channel=per_channel)
    return make


def _static(fmt: str, activation: str, per_channel: bool,
            reduce_range: bool) -> Callable[[Path, Path, list[dict[str, np.ndarray]]], None]:
    def make(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        if not calib:
            raise ValueError("needs calibration inputs")
        quantize_static(str(src), str(dst), _reader(calib), quant_format=getattr(QuantFormat, fmt),
                        activation_type=getattr(QuantType, activation), weight_type=QuantType.QInt8,
                        per_channel=per_channel, reduce_range=reduce_range)
    return make


def _w4(fmt: str) -> Callable[[Path, Path, list[dict[str, np.ndarray]]], None]:
    def make(src: Path, dst: Path, calib: list[dict[str, np.ndarray]]) -> None:
        import onnx
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        model = onnx.load(str(src))
        q = MatMulNBitsQuantizer(model, bits=4, block_size=W4_BLOCK, is_symmetric=True,
                                 quant_format=getattr(QuantFormat, fmt))
        q.process()
        q.model.save_model_to_file(str(dst), use_external_data_format=False)
    return make


# suffix -> how it is made; the order is the table's
VARIANTS: dict[str, Callable[[Path, Path, list[dict[str, np.ndarray]]], None]] = {
    "dyn": _dynamic(per_channel=False),
    "dyn-pc": _dynamic(per_channel=True),
    "qdq": _static("QDQ", "QInt8", per_channel=True, reduce_range=False),
    "qdq-u8": _static("QDQ", "QUInt8", per_channel=False, reduce_range=True),
    "qdq-a16": _static("QDQ", "QInt16", per_channel=False, reduce_range=False),
    "qop": _static("QOperator", "QInt8", per_channel=True, reduce_range=False),
    "qop-u8": _static("QOperator", "QUInt8", per_channel=False, reduce_range=True),
    "w4": _w4("QOperator"),
    "w4-qdq": _w4("QDQ"),
}


def _changed(src: Path, dst: Path) -> bool:
    """Whether the quantizer touched the model (it leaves models with nothing it quantizes as they are)."""
    import onnx

    def ops(p: Path) -> list[tuple[str, str]]:
        return sorted((n.domain, n.op_type) for n in onnx.load(str(p), load_external_data=False).graph.node)
    return ops(src) != ops(dst)


def _ort_refuses(path: Path) -> str | None:
    """Why ONNX Runtime cannot load ``path`` (its quantizers at times write invalid models: the
    4-bit QDQ form moves the model to opset 21 and leaves ReduceMean's ``axes`` an attribute), or None."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return None


def preprocessed(float_onnx: Path, out_dir: Path, optimize: bool) -> Path:
    """``quant_pre_process`` (symbolic shape inference, then ONNX Runtime's basic optimizations unless
    ``optimize`` is off), the step ONNX Runtime's quantization guide runs first: its quantizers need
    the shapes of the fused ops' outputs. The model as it is where that step fails (with a printed line)."""
    from onnxruntime.quantization import quant_pre_process

    dst = out_dir / f"{float_onnx.stem}.pre{'' if optimize else '-noopt'}.onnx"
    try:
        quant_pre_process(str(float_onnx), str(dst), skip_optimization=not optimize)
    except Exception as exc:
        print(f"quant_pre_process failed on {float_onnx.name} ({type(exc).__name__}); quantizing it as it is")
        return float_onnx
    return dst


def _attempt(make: Callable[[Path, Path, list[dict[str, np.ndarray]]], None], src: Path, dst: Path,
             calib: list[dict[str, np.ndarray]]) -> str | None:
    """Run one quantizer; why its result is unusable (it failed, changed nothing, or wrote a model
    ONNX Runtime cannot load), or None."""
    try:
        make(src, dst, calib)
    except Exception as exc:  # the quantizers raise anything; one variant failing skips only it
        return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:120]}"
    if not _changed(src, dst):
        return "the quantizer found nothing to quantize"
    refused = _ort_refuses(dst)
    return f"ONNX Runtime cannot load what its quantizer wrote: {refused}" if refused else None


def quantized_variants(float_onnx: Path, out_dir: Path,
                       calib_inputs: list[dict[str, np.ndarray]]) -> list[tuple[str, Path]]:
    """(suffix, path) of each quantized variant of ``float_onnx`` that ONNX Runtime's quantizers made,
    written to ``out_dir`` as ``<stem>.<suffix>.onnx``; a variant the model cannot take is skipped
    with a printed line saying why. Each quantizer runs after :func:`preprocessed` with its
    optimizations, and again without them where that fails: they merge equal initializers (the zero
    biases of seeded models), and the QOperator quantizer then writes a QGemm whose bias is an int8
    LayerNorm bias, which ONNX Runtime refuses to load; without them, other models fail to quantize."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = [preprocessed(float_onnx, out_dir, optimize=True)]
    made: list[tuple[str, Path]] = []
    for suffix, make in VARIANTS.items():
        dst = out_dir / f"{float_onnx.stem}.{suffix}.onnx"
        why = _attempt(make, sources[0], dst, calib_inputs)
        if why is not None:  # (the optimizations fuse MatMul + Add into the Gemm MatMulNBits never takes)
            if len(sources) == 1:
                sources.append(preprocessed(float_onnx, out_dir, optimize=False))
            why = _attempt(make, sources[1], dst, calib_inputs)
        if why is not None:
            print(f"skip {float_onnx.stem}.{suffix}: {why}", flush=True)
            continue
        made.append((suffix, dst))
    return made


def calibration_inputs(float_onnx: Path, count: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded inputs of the model's static shapes: token ids in [0, 100), masks of ones, floats N(0, 1)."""
    import onnx

    rng = np.random.default_rng(seed)
    model = onnx.load(str(float_onnx), load_external_data=False)
    feeds: list[dict[str, np.ndarray]] = []
    for _ in range(count):
        feed: dict[str, np.ndarray] = {}
        for inp in model.graph.input:
            shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
            if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
                feed[inp.name] = (np.ones(shape, np.int64) if "mask" in inp.name
                                  else rng.integers(0, 100, shape).astype(np.int64))
            else:
                feed[inp.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)
    return feeds
