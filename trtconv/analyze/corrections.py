"""Corrections to the 10.15 operator table, each with where it comes from.

The operator rows start from onnx-tensorrt's published table (docs/operators.md, 10.15).
The oracle (tools/oracle: `check` next to the real TensorRT-RTX 1.7 parser and a CPU-only
build over ONNX's node test models) found rows that are wrong. A correction applies to a
version only where it is backed for that version:

- ``MEASURED``: observed with TensorRT-RTX 1.7.1 (applied to the ``rtx`` table only);
- ``SOURCE``: read in onnx-tensorrt's importer sources (release 10.1 and main at commit
  0137504, a 10.x tree with the opset-23 Attention checker). Applied to every version: 10.16
  and 11.x sources could not be retrieved, so a check present there is assumed kept, and the
  RTX measurement of the 11.x parser agrees with each one;
- ``DOCS``: written in NVIDIA's own documentation of the parser.

``maketables.py`` applies them and writes the kind and text into each row's ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MEASURED = "measured with TensorRT-RTX 1.7.1 (tools/oracle)"
SOURCE = "onnx-tensorrt sources"
CHECKERS = "onnx/onnx-tensorrt onnxOpCheckers.cpp (main, commit 0137504)"
DOCS = "NVIDIA docs"
ALL = ("10.16", "11.4", "rtx")
RTX_ONLY = ("rtx",)


@dataclass(frozen=True)
class Correction:
    op_type: str
    versions: tuple[str, ...]
    kind: str  # MEASURED, SOURCE or DOCS
    evidence: str  # what was seen or read, short
    types: str | None = None  # replaces the types column ("" = not checked)
    add_types: str = ""  # appended to the types column
    params: dict[str, str | None] = field(default_factory=dict)  # set (None: remove) a parameter

    @property
    def source(self) -> str:
        return f"{self.kind}: {self.evidence}"


_INT8_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Greater", "GreaterOrEqual", "Less",
                     "LessOrEqual")

CORRECTIONS: tuple[Correction, ...] = (
    # --- backed by the importer sources (all versions) -------------------------------------------------
    Correction("Resize", ALL, SOURCE, "onnxOpImporters.cpp Resize maps mode 'cubic' to InterpolationMode::kCUBIC",
               params={"mode": "nearest|linear|cubic"}),
    Correction("Range", ALL, SOURCE, "onnxOpImporters.cpp Range: 'only supports int32, int64, and float input types'",
               types="FP32,INT32,INT64"),
    Correction("Mod", ALL, SOURCE, "onnxOpImporters.cpp Mod: with fmod=0 'Inputs cannot be of floating point types'",
               params={"fmod0_types": "INT32|INT64"}),
    Correction("TensorScatter", ALL, DOCS, "operators.md: 'past_cache and update must be 4D'",
               params={"ranks": "4"}),
    Correction("LpPool", ALL, SOURCE, f"{CHECKERS} LpPool: 'Only L1 and L2 normalization are supported'",
               params={"p": "1|2"}),
    Correction("BatchNormalization", ALL, SOURCE, f"{CHECKERS}: 'does not support training_mode == 1'",
               params={"training_mode": "0"}),
    Correction("Attention", ALL, SOURCE, f"{CHECKERS}: softcap and softmax_precision are not supported",
               params={"no_attrs": "softcap|softmax_precision"}),
    *(Correction(op, ALL, SOURCE, f"{CHECKERS} {op}: 'Unsupported data type' unless dtype is FLOAT or FLOAT16",
                 params={"dtype_attr": "FP32|FP16"})
      for op in ("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike")),
    # The types column of the window functions lists their *output* types; input 0 is the integer size.
    Correction("HannWindow", ALL, DOCS, "operators.md types are the output's; input 0 is the integer size", types=""),
    Correction("HammingWindow", ALL, DOCS, "operators.md types are the output's; input 0 is the integer size",
               types=""),
    Correction("BlackmanWindow", ALL, DOCS, "operators.md types are the output's; input 0 is the integer size",
               types=""),
    # --- measured with TensorRT-RTX 1.7.1 (rtx only) ---------------------------------------------------
    *(Correction(op, RTX_ONLY, MEASURED, "INT8 inputs parse and build", add_types="INT8") for op in _INT8_ELEMENTWISE),
    Correction("Equal", RTX_ONLY, MEASURED, "UINT8 inputs parse and build", add_types="INT8,UINT8"),
    Correction("Identity", RTX_ONLY, MEASURED, "INT8 inputs parse and build", add_types="INT8"),
    Correction("Clip", RTX_ONLY, MEASURED, "INT32 and INT64 inputs (min/max of the same type) parse and build",
               add_types="INT32,INT64"),
    Correction("LSTM", RTX_ONLY, MEASURED, "inside an If branch, a used Y_h/Y_c output fails the build "
                                           "(graphScope assertion; Y alone builds)", params={"state_in_if": "error"}),
    # The same builder assertion is likely on 10.x/11.x (graphScope is builder core), but it is not
    # measured there: a warning, not a verdict.
    *(Correction("LSTM", (v,), MEASURED, "on TensorRT-RTX only: the RTX builder fails an LSTM in an If branch "
                                         "whose Y_h/Y_c is used; warned, not measured on this version",
                 params={"state_in_if": "warning"}) for v in ("10.16", "11.4")),
    Correction("DequantizeLinear", RTX_ONLY, MEASURED, "'4-bit quantization requires an even number of elements'",
               params={"even_4bit": "1"}),
    Correction("AveragePool", RTX_ONLY, MEASURED, "1-D pooling (rank 3) parses and builds", params={"ranks": "3|4|5"}),
    Correction("MaxPool", RTX_ONLY, MEASURED, "1-D pooling (rank 3) parses and builds",
               params={"ranks": "3|4|5"}),
    Correction("CumSum", RTX_ONLY, MEASURED, "a run-time axis parses and builds; INT32/INT64 data too",
               add_types="INT32,INT64", params={"const_inputs": None}),

    Correction("Celu", RTX_ONLY, MEASURED, "FP16/BF16 inputs fail in the importer (operand rank assertion)",
               types="FP32"),
    Correction("Range", RTX_ONLY, MEASURED, "FP32 start/limit/delta that are network inputs fail "
                                            "(shape tensors must be INT32/INT64)", params={"float_const": "1"}),
    Correction("Resize", RTX_ONLY, MEASURED, "'Network input scales is a shape tensor and must have type Int32 "
                                             "or Int64'", params={"scales_not_input": "2"}),
    Correction("Upsample", RTX_ONLY, MEASURED, "run-time scales fail like Resize's", params={"scales_not_input": "1"}),
    Correction("MatMul", RTX_ONLY, MEASURED, "a 1-D A with a rank >= 3 B fails (reshape changes volume)",
               params={"vector_matrix_max_rank": "2"}),
    Correction("TensorScatter", RTX_ONLY, MEASURED, "'Only linear mode is supported'", params={"mode": "linear"}),
    Correction("LSTM", RTX_ONLY, MEASURED, "layout=1 (batch first) parses and builds", params={"layout": "0|1"}),
    Correction("GRU", RTX_ONLY, MEASURED, "layout=1 (batch first) parses and builds", params={"layout": "0|1"}),
    Correction("RNN", RTX_ONLY, MEASURED, "layout=1 (batch first) parses and builds", params={"layout": "0|1"}),
    Correction("Attention", RTX_ONLY, MEASURED, "a mask with is_causal, and K/V head sizes that differ, are refused "
                                                "by the importer", params={"mask_causal": "0", "kv_head_size": "equal"}),
    Correction("Attention", RTX_ONLY, MEASURED, "input 6 (nonpad_kv_seqlen) parses", params={"unsupported_inputs": "4|5"}),
    # Parsed (parse level measured), but the ahead-of-time RTX build fails: a builder-stage error.
    Correction("Attention", RTX_ONLY, MEASURED, "parses; the build fails ('not supported by a dedicated kernel', "
                                                "Myelin decompose errors)", params={"no_rtx_kernel": "1"}),
    Correction("NonMaxSuppression", RTX_ONLY, MEASURED, "parses (INMSLayer); the build fails ('no runners')",
               params={"no_rtx_kernel": "1"}),
)


def corrections_for(version: str) -> dict[str, list[Correction]]:
    out: dict[str, list[Correction]] = {}
    for c in CORRECTIONS:
        if version in c.versions:
            out.setdefault(c.op_type, []).append(c)
    return out
