"""The FP32 model Q/DQ go into, and the one place that decides when it is held, let go or derived again.

Preparing is the opset upgrade (per-channel Q/DQ, float16 Q/DQ) and, for the FP16 remainder,
the Conv -> BatchNormalization fold. The prepared copy holds every weight once more, so the
INT8 stage lets it go while the calibration samples run and once the candidate is built, and
derives it again (the same: both steps are deterministic) only where a later step needs it.
A model whose weights stay on disk prepares into references (kilobytes): it is kept instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import version_converter

from trtconv.errors import UnsupportedModelError
from trtconv.load import has_lazy_weights, is_stripped, structure_only
from trtconv.onnxutil import constant_tensor, default_opset
from trtconv.precision.bn_fold import FoldedBatchNorm, fold_batchnorms
from trtconv.precision.int8.parameters import FP16_QDQ_OPSET, MIN_QDQ_OPSET, Int8Settings


def upgrade_opset(model: onnx.ModelProto, target: int = MIN_QDQ_OPSET) -> tuple[onnx.ModelProto, tuple[int, int] | None]:
    """Per-channel Q/DQ needs opset 13: convert older models rather than emit invalid ones."""
    current = default_opset(model)
    if current >= target:
        return model, None

    try:
        converted = version_converter.convert_version(structure_only(model), target)
        if not _restore_weights(converted, model):  # an adapter renamed or rewrote a weight: the slow way
            converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise UnsupportedModelError(
            f"cannot upgrade the model from opset {current} to {target} for INT8 Q/DQ: {str(exc).splitlines()[0]}",
            hint="re-export the model with opset >= 13",
        ) from exc
    return converted, (current, target)


def _main_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Main-graph initializers and Constant-node values, by tensor name (what ``structure_only`` strips)."""
    out = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        t = constant_tensor(n)
        if t is not None:
            out[n.output[0]] = t
    return out


def _restore_weights(converted: onnx.ModelProto, original: onnx.ModelProto) -> bool:
    """Put the original's bytes back into the tensors ``structure_only`` stripped (each weight is
    copied once, here); False when one of them has no original of the same name and size.

    The version converter serializes and parses the whole model on each side: on the structure
    alone it costs nothing, where the weights made it several transient copies of the model.
    """
    source = _main_constants(original)
    for name, t in _main_constants(converted).items():
        if not is_stripped(t):
            continue
        src = source.get(name)
        if src is None or list(src.dims) != list(t.dims) or src.data_type != t.data_type:
            return False
        keep = t.name
        t.CopyFrom(src)
        t.name = keep
        if t.data_location == onnx.TensorProto.DEFAULT:
            t.ClearField("data_location")  # as the converter writes it (loading external data sets it)
    return not any(is_stripped(t) for t in _main_constants(converted).values())


def _prepare(model: onnx.ModelProto, settings: Int8Settings
             ) -> tuple[onnx.ModelProto, tuple[int, int] | None, tuple[FoldedBatchNorm, ...]]:
    """The FP32 model Q/DQ go into: opset high enough for the Q/DQ wanted; BatchNorms folded for FP16."""
    fp16 = settings.remainder == "fp16"
    work, upgrade = upgrade_opset(model, FP16_QDQ_OPSET if fp16 else MIN_QDQ_OPSET)
    folded: tuple[FoldedBatchNorm, ...] = ()
    if fp16 and settings.fold_batchnorm:
        work, folded = fold_batchnorms(work, copy=work is model)  # the upgrade's copy is ours to edit
    return work, upgrade, folded


Pair = tuple[onnx.ModelProto, onnx.ModelProto]


@dataclass
class PreparedModels:
    """The prepared model and the prepared calibration twin (the same object without a twin).

    Mutable on purpose: it is the one place that holds them, and ``release`` is what lets the
    weight copy go (callers keep no reference of their own past the step that needs it).
    """

    model: onnx.ModelProto
    twin: onnx.ModelProto | None  # the ONNX Runtime-runnable form, if any
    settings: Int8Settings
    upgrade: tuple[int, int] | None
    folded: tuple[FoldedBatchNorm, ...]
    held: Pair | None
    keep: bool  # weights left on disk: the prepared pair is references to them, kept

    @classmethod
    def of(cls, model: onnx.ModelProto, twin: onnx.ModelProto | None, settings: Int8Settings) -> PreparedModels:
        work, upgrade, folded = _prepare(model, settings)
        cal = _prepare(twin, settings)[0] if twin is not None else work
        keep = has_lazy_weights(model) and (twin is None or has_lazy_weights(twin))
        return cls(model, twin, settings, upgrade, folded, (work, cal), keep)

    def get(self) -> Pair:
        """(prepared model, prepared calibration form): held, or derived again (the same)."""
        if self.held is None:
            work = _prepare(self.model, self.settings)[0]
            self.held = work, (_prepare(self.twin, self.settings)[0] if self.twin is not None else work)
        return self.held

    def release(self) -> None:
        """Let the prepared copy go (unless it is references to weights on disk, kilobytes)."""
        if not self.keep:
            self.held = None
