"""The declarations: one :class:`Setting` per user-facing setting, in the order ``--help`` lists them.

A setting's ``name`` is its Python name (an API settings field, the click parameter); the
command-line flag and the spec-file key are the same name in kebab-case (``max_samples`` ->
``--max-samples`` / ``max-samples = 100``). ``aliases`` are other documented spellings
(trtexec's where it has a word); ``deprecated`` are old spellings kept hidden for one
release, each printing a one-line warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RTX_TARGET = "rtx"  # --trt rtx: TensorRT-RTX (builds without a GPU)
TRT_TARGETS = ("10.16", "11.4", RTX_TARGET)
NEWEST_TENSORRT = "11.4"
# --trt when not given: None means "the TensorRT that is installed" (trtconv.trt.environment.installed_target),
# falling back to NEWEST_TENSORRT where none is.
DEFAULT_TARGET: str | None = None

COMMANDS = ("check", "rewrite", "quantize", "build", "verify", "bench")
PRECISION = ("quantize", "build")  # the commands that change precision share their sample/gate settings


@dataclass(frozen=True)
class Setting:
    """One setting: what the user can say, once."""

    name: str  # snake_case: the API field and click parameter; kebab-case: the flag and the spec key
    type: str  # "str" "int" "float" "path" "bool" "choice" "limit" (a number or OUTPUT=NUMBER) "shapes"
    help: str
    commands: tuple[str, ...]
    default: Any = None
    multiple: bool = False  # repeatable on the command line; a tuple in Python; a list in a spec file
    choices: tuple[str, ...] = ()
    range: tuple[float | None, float | None] | None = None  # inclusive bounds for int/float
    metavar: str | None = None
    aliases: tuple[str, ...] = ()  # documented other spellings, e.g. "--calib-limit"
    deprecated: tuple[str, ...] = ()  # hidden old spellings: still accepted, with a one-line warning
    secondary: str | None = None  # the off-switch of a default-on bool, e.g. "--fp16-io" for keep_io_types
    show_default: bool = True

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The spec-file key."""
        return self.name.replace("_", "-")


def _s(name: str, type: str, help: str, commands: tuple[str, ...], **kw: Any) -> Setting:
    return Setting(name=name, type=type, help=help, commands=commands, **kw)


_SAMPLES = (
    _s("calib_data", "path", "Sample data: a folder (or file) of .npy/.npz samples, one .npz holding many "
       "(000/images, 001/images, ...), or a folder of images. int8: calibration; fp16: activation ranges. Both: the "
       "accuracy gate.", PRECISION, metavar="PATH"),
    _s("preprocess", "str", "Image preprocessing, e.g. preset=ppocr-det or size=224x224,order=bgr,mean=0.5/0.5/0.5,"
       "std=0.5/0.5/0.5,scale=1/255,layout=nchw (presets: ppocr-det, ppocr-rec, ppocr-cls, imagenet, yolo).",
       PRECISION, metavar="SPEC"),
    _s("calib_loader", "path", "Python file defining samples(inputs) that yields dicts of input name -> array. Runs "
       "your code.", PRECISION, metavar="FILE.py"),
    _s("random_data", "int", "Use N seeded random samples (smoke tests only: real data gives real ranges; the gate "
       "then says 'not checked').", PRECISION, range=(1, None), metavar="N"),
    _s("max_samples", "int", "Use at most this many samples (0: all).", PRECISION, default=0, range=(0, None),
       aliases=("--calib-limit",)),
    _s("held_out", "str", "int8: judge the result on N samples (or this fraction), drawn at random a source (folder, "
       "npz trtconv_group) at a time and never used to calibrate or choose [default: 40%, at least the 45 a pass "
       "needs, at most half].", PRECISION, metavar="N|FRACTION"),
    _s("sources", "choice", "int8: what the files of one subfolder of --calib-data are: folders (one source each: a "
       "page's lines, a speaker's clips; they stay in one part of the split and count as one sample where they "
       "agree) or files (independent draws that only share a folder, e.g. class folders of unrelated images).",
       PRECISION, default="folders", choices=("folders", "files")),
    _s("split_seed", "int", "int8: the seed of the random draw of samples into calibration, selection and judging "
       "parts.", PRECISION, default=0, range=(0, None)),
)
_EXCLUDE = (
    _s("exclude", "str", "Keep nodes whose name matches this glob out of the precision change (int8: also op types; "
       "they take the remainder precision); repeatable, comma-separated.", PRECISION, multiple=True,
       metavar="PATTERN"),
    _s("exclude_op", "str", "Keep every node of this op type out of the precision change; repeatable, "
       "comma-separated.", PRECISION, multiple=True, metavar="OP"),
)
_FP16 = (
    _s("keep_io_types", "bool", "fp16: keep the model's float32 inputs and outputs (Casts at the edges), or make "
       "them float16.", PRECISION, default=True, secondary="--fp16-io"),
    _s("max_activation", "float", "fp16 (and int8's FP16 remainder): keep nodes whose tensors exceed |X| on the "
       "sample data in FP32 [default: 4096; 0: off].", PRECISION, metavar="X"),
    _s("max_initializer", "float", "fp16 (and int8's FP16 remainder): keep nodes whose constants exceed |X| in FP32 "
       "[default: 65504; 0: off].", PRECISION, metavar="X"),
    _s("no_fold_batchnorm", "bool", "Do not fold BatchNormalization into the Conv before it.", PRECISION,
       default=False),
)
_INT8 = (
    _s("calib_method", "choice", "int8: how activation ranges are chosen from the calibration data (auto, the "
       "default: try entropy, percentile 99.9/99.99/99.999, minmax and mse, keep the one most accurate on the "
       "selection samples, never the judging ones).", PRECISION,
       default="auto", choices=("entropy", "percentile", "minmax", "mse", "auto")),
    _s("percentile", "float", "int8: the percentile for --calib-method percentile.", PRECISION, default=99.99,
       range=(50.0, 100.0)),
    _s("calib_cache", "path", "int8: read scales from / write scales to this calibration cache.", PRECISION,
       metavar="FILE"),
    _s("no_calib_cache", "bool", "int8: ignore --calib-cache (recalibrate).", PRECISION, default=False),
    _s("int8_remainder", "choice", "int8: the precision of everything outside the Q/DQ pairs (fp16 under the FP16 "
       "overflow rules).", PRECISION, default="fp16", choices=("fp16", "fp32")),
    _s("auto_exclude", "bool", "int8: when the gate fails, keep the fewest layers out of INT8 until it passes (named "
       "in the report), at least --min-precision-share of them staying INT8 (else exit 8); --no-auto-exclude: "
       "fail at once (exit 7).", PRECISION, default=True, secondary="--no-auto-exclude"),
    _s("sensitivity", "bool", "int8: report the error each quantized layer adds on the selection samples (always done "
       "when the gate fails).", PRECISION, default=False),
    _s("auto_per_tensor", "bool", "int8 --calib-method auto: also try a per-tensor mix of the methods (each tensor "
       "the one under which the layers reading it add the least error), kept if more accurate on the selection samples.",
       PRECISION, default=False),
    _s("no_bias_correction", "bool", "int8 --calib-method auto: do not try folding each layer's mean INT8 output "
       "shift into its bias (tried by default, kept only if more accurate on the selection samples).", PRECISION,
       default=False),
    _s("int8_unverified", "bool", "int8: build even when the judged samples are too few to support the claim a pass "
       "makes (otherwise exit 11, nothing written); the manifest, --json and the report say 'unverified'.",
       PRECISION, default=False),
    _s("no_smoothing", "bool", "int8 --calib-method auto: do not try SmoothQuant-style migration of LayerNorm "
       "outlier channels into the MatMul/Gemm weights that read them (tried by default, kept only if more "
       "accurate on the selection samples).", PRECISION, default=False),
)
_GATE = PRECISION + ("verify",)
_GATE_SETTINGS = (
    _s("max_abs", "limit", "Fail (exit 7) if an output's max abs error exceeds X; OUTPUT=X for one output. "
       "Repeatable.", _GATE, multiple=True, metavar="[OUTPUT=]X", deprecated=("--atol",)),
    _s("max_rel", "limit", "Fail (exit 7) if an output's max rel error exceeds X; OUTPUT=X for one output. "
       "Repeatable.", _GATE, multiple=True, metavar="[OUTPUT=]X", deprecated=("--rtol",)),
    _s("min_cosine", "limit", "Fail (exit 7) if an output's cosine similarity is below X [default: int8 0.99, fp16 "
       "0.999]; OUTPUT=X for one output (e.g. scores=0.995). Repeatable.", _GATE, multiple=True,
       metavar="[OUTPUT=]X"),
    _s("min_top1", "limit", "Fail (exit 7) if the top-1 agreement of a classifier-like output is below X. "
       "Repeatable.", _GATE, multiple=True, metavar="[OUTPUT=]X"),
    _s("gate_output", "str", "Gate only these outputs (the others are still reported); repeatable, comma-separated.",
       PRECISION, multiple=True, metavar="OUTPUT"),
    _s("allow_nonfinite", "bool", "Do not fail when the quantized model outputs NaN/Inf.", PRECISION, default=False),
)
_B = ("build",)
_REWRITE = ("rewrite", "build")
_PROFILE = (
    _s("min_shapes", "shapes", "Profile minimum; repeat per profile.", _B, multiple=True, metavar="NAME:DxD,..."),
    _s("opt_shapes", "shapes", "Profile optimum; repeat per profile.", _B, multiple=True, metavar="NAME:DxD,..."),
    _s("max_shapes", "shapes", "Profile maximum; repeat per profile.", _B, multiple=True, metavar="NAME:DxD,..."),
)
_ENGINE = (
    _s("workspace", "str", "Workspace memory pool limit, e.g. 4G.", _B, metavar="SIZE"),
    _s("memory_pool", "str", "Any memory pool limit, e.g. tactic_shared_memory:48K (repeatable).", _B,
       multiple=True, metavar="POOL:SIZE"),
    _s("timing_cache", "path", "Timing cache file (default: one per GPU and TensorRT version under "
       "~/.cache/trtconv).", _B),
    _s("no_timing_cache", "bool", "Neither load nor save a timing cache.", _B, default=False),
    _s("opt_level", "int", "TensorRT builder optimization level.", _B, default=3, range=(0, 5),
       aliases=("--builder-optimization-level",)),
    _s("hardware_compat", "choice", "Build for other GPUs too (ampere+ or same compute capability); may be slower.",
       _B, default="none", choices=("none", "ampere+", "same-cc")),
    _s("compute_capability", "str", "--trt rtx: compute capabilities to build for, e.g. 8.6,8.9 (repeatable; "
       "default: RTX's portable set 8.0 8.6 8.9 12.0 12.1).", _B, multiple=True, metavar="CC,..."),
    _s("version_compatible", "bool", "Engine runs on later TensorRT versions (lean runtime).", _B, default=False),
    _s("exclude_lean_runtime", "bool", "With --version-compatible: do not embed the runtime.", _B, default=False),
    _s("plugins", "path", "Extra TensorRT plugin library to load (repeatable).", _B, multiple=True),
    _s("min_precision_share", "float", "fp16/int8: fail (exit 8) if fewer compute layers run in that precision "
       "(quantize int8 --auto-exclude: keep at least this share of Conv/MatMul/Gemm layers in INT8).", PRECISION,
       default=0.5, range=(0, 1), metavar="SHARE"),
)
_REWRITES = (
    _s("dcn_target", "choice", "What DCNv2 nodes become: standard ONNX DeformConv (TensorRT >= 10.1 imports it), "
       "TensorRT's ModulatedDeformConv2d v2 plugin node, trtconv's own DCNv2 plugin node, or portable: standard ops "
       "only (corner Gather + Gemm; no plugin, e.g. TensorRT-RTX). build's default: portable for --trt rtx, else "
       "deformconv.", _REWRITE, show_default=False),
    _s("dcn_plugin_spec", "path", "Spec of trtconv's DCNv2 plugin (for --dcn-target trtconv-plugin); default: the "
       "spec shipped inside trtconv (trtconv/rewrites/dcn/dcnv2_spec.json).", _REWRITE),
    _s("plugin_map", "path", "YAML map from custom ops to plugin nodes (format in docs/rewrite.md).", _REWRITE),
    _s("skip_rule", "str", "Do not apply this built-in rewrite rule (repeatable); its nodes stay as they are (names "
       "in docs/rewrite.md; an unknown name is exit 2 listing the rules).", _REWRITE, multiple=True, metavar="NAME"),
    _s("fold", "bool", "Fold constant subgraphs.", _REWRITE, default=True, secondary="--no-fold"),
    _s("fold_limit", "str", "Largest tensor constant folding may create (bytes, or with k/M/G).", _REWRITE,
       default="16M"),
    _s("int32", "bool", "Narrow INT64 initializers to INT32 where every consumer accepts INT32 and values fit.",
       _REWRITE, default=True, secondary="--no-int32"),
    _s("verify", "bool", "Prove every rewrite in ONNX Runtime against a float64 reference, and the whole graph.",
       ("rewrite",), default=True, secondary="--no-verify"),
    _s("tolerance", "float", "Node proofs pass when max |error| <= tolerance * max(1, max |reference|).", _REWRITE,
       default=1e-5),
)
_OUTPUT = (
    _s("prepared", "path", "Where to write the prepared ONNX (default: ENGINE stem + .prepared.onnx).", _B),
    _s("prepare_only", "bool", "Stop after writing the prepared ONNX (no TensorRT needed).", _B, default=False),
    _s("keep_prepared", "bool", "Keep the prepared ONNX when the build fails (for debugging); by default a failed "
       "build leaves nothing.", _B, default=False),
    _s("no_verify", "bool", "Skip comparing the engine with ONNX Runtime.", _B, default=False),
    _s("split_tail", "bool", "Where the target cannot run NonZero/NonMaxSuppression (--trt rtx): build the graph "
       "before the first one into the engine, and write it and everything after it as ENGINE stem + .tail.onnx for "
       "ONNX Runtime (its inputs: the engine's outputs), proven equal to the model on ONNX Runtime. TensorRT 10/11 "
       "run both natively: nothing is split there.", _B, default=False),
    _s("no_preflight", "bool", "Skip running the graph at every profile corner on ONNX Runtime before the TensorRT "
       "build (it runs only where verify uses the outputs or no builder follows).", _B, default=False),
)

SETTINGS: tuple[Setting, ...] = (
    _s("precision", "choice", "Made explicit in the ONNX (FP16 casts / INT8 Q-DQ), then built strongly typed.",
       PRECISION, default="fp32", choices=("fp32", "fp16", "int8")),  # quantize: fp16 or int8, required
    *_SAMPLES, *_EXCLUDE, *_FP16, *_INT8, *_GATE_SETTINGS,
    _s("shapes", "shapes", "Static shapes for dynamic inputs, e.g. images:1x3x640x640 (build: one profile with "
       "min = opt = max, trtexec --shapes).", ("check", "rewrite", "quantize", "build", "verify"),
       metavar="NAME:DxD,..."),
    *_PROFILE, *_ENGINE, *_REWRITES, *_OUTPUT,
    _s("seed", "int", "Seed for proofs and verification inputs.", ("rewrite", "build", "verify"), default=0),
    _s("trt", "choice", "Target TensorRT version, or rtx for TensorRT-RTX [default: the TensorRT that is installed: "
       "TensorRT 10/11, else TensorRT-RTX].",
       ("check", "rewrite", "build", "verify", "bench"), default=DEFAULT_TARGET, choices=TRT_TARGETS,
       show_default=False),
)
_BY_NAME = {s.name: s for s in SETTINGS}
assert len(_BY_NAME) == len(SETTINGS), "a setting is declared twice"


def declared(name: str) -> Setting:
    return _BY_NAME[name]


def for_command(command: str) -> tuple[Setting, ...]:
    """The settings ``command`` takes, in declaration order."""
    return tuple(s for s in SETTINGS if command in s.commands)


INT8_ONLY = tuple(s.name for s in _INT8)  # what only an int8 run reads (calibration, auto-exclusion, the claim)
INT8_SPLIT = ("held_out", "sources", "split_seed")  # sample settings only int8 reads: its split into parts


def given_flags(values: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The flags of the settings ``names`` that ``values`` sets other than their default: what a run that reads none
    of them says it was given (never drops in silence)."""
    return [declared(n).flag for n in names if values.get(n, declared(n).default) not in (declared(n).default, ())]
