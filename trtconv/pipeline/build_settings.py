"""What ``build`` was asked, as one value: :class:`BuildSettings`, named field for field like the
declared settings (trtconv.settings), and the stage settings derived from it.

The command line, a spec file and ``trtconv.build(...)`` all end here with the same names:
``build --max-samples 100``, ``max-samples = 100`` and ``BuildSettings(max_samples=100)``.
The TensorRT plan, the rewrite settings and the precision settings are functions of it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from trtconv.errors import UsageError
from trtconv.load import parse_shapes
from trtconv.outputs import check_output_path
from trtconv.pipeline.quantize import QuantizeSettings
from trtconv.plan import (
    BuildPlan,
    Precision,
    TimingCacheChoice,
    manifest_path,
    parse_compute_capabilities,
    parse_memory_pools,
    parse_size,
)
from trtconv.precision import cache_files
from trtconv.rewrites import TAIL_SUFFIX, RewriteSettings, load_plugin_map, tail_ops, trtconv_plugin_spec
from trtconv.settings import declared, for_command, given_flags
from trtconv.trt import for_target

PathLike = str | os.PathLike[str]
PLUGIN_FREE_DCN = "portable"  # rewrites.dcn's target of standard ONNX ops only (no plugin, no DeformConv)


# Settings that act on the TensorRT build or the engine's verification only.
ENGINE_ONLY = ("workspace", "memory_pool", "timing_cache", "opt_level", "hardware_compat", "compute_capability",
               "version_compatible", "exclude_lean_runtime", "tolerance")


def _d(name: str) -> Any:
    """The declared default (one place: trtconv.settings)."""
    return declared(name).default


@dataclass(frozen=True)
class BuildSettings:
    """``trtconv build``'s settings, one field per declared setting (same names, same defaults)."""

    precision: Precision = _d("precision")
    calib_data: Path | None = None  # required for int8, optional for fp16
    preprocess: str | None = None
    calib_loader: Path | None = None
    random_data: int | None = None
    max_samples: int = _d("max_samples")  # 0: all
    held_out: str | int | float | None = None  # int8: N samples or a fraction kept for the gate
    exclude: tuple[str, ...] = ()
    exclude_op: tuple[str, ...] = ()
    keep_io_types: bool = _d("keep_io_types")
    max_activation: float | None = None
    max_initializer: float | None = None
    no_fold_batchnorm: bool = _d("no_fold_batchnorm")
    calib_method: Literal["entropy", "percentile", "minmax", "mse", "auto"] = _d("calib_method")
    percentile: float = _d("percentile")
    calib_cache: Path | None = None
    no_calib_cache: bool = _d("no_calib_cache")
    int8_remainder: Literal["fp16", "fp32"] = _d("int8_remainder")
    auto_exclude: bool = _d("auto_exclude")
    sensitivity: bool = _d("sensitivity")
    auto_per_tensor: bool = _d("auto_per_tensor")
    no_bias_correction: bool = _d("no_bias_correction")
    no_smoothing: bool = _d("no_smoothing")
    int8_unverified: bool = _d("int8_unverified")
    split_seed: int = _d("split_seed")
    sources: Literal["folders", "files"] = _d("sources")
    max_abs: tuple[str | float, ...] = ()  # each "X" or "OUTPUT=X"
    max_rel: tuple[str | float, ...] = ()
    min_cosine: tuple[str | float, ...] = ()
    min_top1: tuple[str | float, ...] = ()
    gate_output: tuple[str, ...] = ()
    allow_nonfinite: bool = _d("allow_nonfinite")
    shapes: str | None = None  # one profile, min = opt = max ("x:1x3x640x640")
    min_shapes: tuple[str, ...] = ()  # one entry per profile
    opt_shapes: tuple[str, ...] = ()
    max_shapes: tuple[str, ...] = ()
    workspace: str | None = None  # e.g. "4G"
    memory_pool: tuple[str, ...] = ()  # "POOL:SIZE"
    timing_cache: Path | None = None  # None: one per GPU and TensorRT version under ~/.cache/trtconv
    no_timing_cache: bool = _d("no_timing_cache")
    opt_level: int = _d("opt_level")
    hardware_compat: Literal["none", "ampere+", "same-cc"] = _d("hardware_compat")
    compute_capability: tuple[str, ...] = ()  # trt="rtx": e.g. ("8.6", "8.9"); () = RTX's portable set
    version_compatible: bool = _d("version_compatible")
    exclude_lean_runtime: bool = _d("exclude_lean_runtime")
    plugins: tuple[Path, ...] = ()  # TensorRT plugin libraries to load
    min_precision_share: float = _d("min_precision_share")  # fp16/int8: fail (exit 8) below this share
    dcn_target: str | None = None  # None: portable for trt="rtx", else rewrite's default
    dcn_plugin_spec: Path | None = None
    plugin_map: Path | None = None
    skip_rule: tuple[str, ...] = ()  # built-in rewrite rules not to apply (every other rule the target needs applies)
    fold: bool = _d("fold")
    fold_limit: str = _d("fold_limit")
    int32: bool = _d("int32")
    tolerance: float = _d("tolerance")
    prepared: Path | None = None  # default: ENGINE stem + .prepared.onnx
    prepare_only: bool = _d("prepare_only")  # stop after the prepared ONNX (no TensorRT needed)
    keep_prepared: bool = _d("keep_prepared")  # a failed build keeps the prepared ONNX (else it leaves nothing)
    no_verify: bool = _d("no_verify")
    split_tail: bool = _d("split_tail")  # --trt rtx: NonZero/NMS and what follows go to an ONNX Runtime tail
    no_preflight: bool = _d("no_preflight")  # skip the profile corners' run on ONNX Runtime before TensorRT
    seed: int = _d("seed")
    trt: str | None = _d("trt")  # "10.16", "11.4", "rtx"; None: the TensorRT that is installed

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> BuildSettings:
        """The settings named in ``params`` (a command's click parameters); other keys are not settings."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k in names})

    def prepared_path(self, output: PathLike) -> Path:
        if self.prepared is not None:
            return Path(self.prepared)
        engine = Path(output)
        name = engine.name[: -len(".engine")] if engine.name.endswith(".engine") else engine.name
        return engine.with_name(name + ".prepared.onnx")

    def tail_path(self, output: PathLike) -> Path:
        """Where ``split_tail`` writes the tail ONNX: ENGINE stem + .tail.onnx."""
        engine = Path(output)
        name = engine.name[: -len(".engine")] if engine.name.endswith(".engine") else engine.name
        return engine.with_name(name + TAIL_SUFFIX)

    def outputs(self, output: PathLike) -> list[Path]:
        """The files a build writes: the prepared ONNX (and the tail with ``split_tail``, where the model is
        split), then (unless prepare_only) manifest and engine."""
        files = [self.prepared_path(output)] + ([self.tail_path(output)] if self.split_tail else [])
        return files if self.prepare_only else [*files, manifest_path(Path(output)), Path(output)]

    def check_outputs(self, output: PathLike, target: str, *, force: bool = False, model: PathLike | None = None
                      ) -> None:
        """Every file the build for ``target`` writes, checked before any work (exists without ``force``,
        a folder where a file goes, a folder missing or read-only, the input ``model`` itself): the engine
        and its manifest, the prepared ONNX, the tail, the calibration cache (the timing cache is not:
        failing to save it is a warning, never the build's failure). One line naming the flag."""
        output = Path(output)
        if model is not None:
            self._not_the_model(Path(model), output)
        if not self.prepare_only:
            check_output_path(output, force=force, flag="-o")
            check_output_path(manifest_path(output), force=force, flag="-o (its manifest)")
        if self.split_tail:  # an existing tail is refused only where the target splits (else it is not written)
            check_output_path(self.tail_path(output), force=force or not tail_ops(target), flag="--split-tail")
        # The default prepared ONNX is derived data, replaced without --force; an explicit --prepared is an output.
        check_output_path(self.prepared_path(output), force=force or self.prepared is None,
                          flag="--prepared" if self.prepared is not None else "the prepared ONNX")
        if self.precision == "int8" and self.calib_cache and not self.no_calib_cache:
            for path in cache_files(Path(self.calib_cache)):  # a cache is read and updated: it may exist
                check_output_path(path, force=True, flag="--calib-cache")

    def _not_the_model(self, model: Path, output: Path) -> None:
        """A path the build writes that is the input model (``build m.prepared.onnx -o m.engine``: the default
        prepared ONNX is the model) is refused, never overwritten; the hint names a path that is not."""
        written = [(output, "-o"), (manifest_path(output), "-o (its manifest)"),
                   (self.prepared_path(output), "--prepared" if self.prepared is not None else "the prepared ONNX")]
        if self.split_tail:
            written.append((self.tail_path(output), "--split-tail (its tail)"))
        for path, flag in written:
            if path.resolve() != model.resolve():
                continue
            if flag.startswith("-o"):
                fix = self.command_line(model, model.with_name(model.stem + ".engine"))
            else:
                fix = replace(self, prepared=str(model.with_name(model.stem + ".build.onnx"))).command_line(model, output)
            raise UsageError(f"{flag} would be {path}, the input model: the build would overwrite it",
                             hint=fix)

    def command_line(self, model: PathLike, output: PathLike, *, drop: tuple[str, ...] = (),
                     extra: tuple[str, ...] = ()) -> str:
        """``trtconv build`` as a hint repeats it, to run as printed: the paths, then every declared
        build setting not at its default by its declared flag (spec-file values included: they are
        settings too), then ``extra`` (the CLI's own flags). ``drop``: settings the hint supplies itself."""
        parts = ["trtconv", "build", shlex.quote(str(model)), "-o", shlex.quote(str(output))]
        for setting in for_command("build"):
            value = getattr(self, setting.name)
            if setting.name in drop or value is None or value == () or value == setting.default:
                continue
            if setting.type == "bool":
                flag = setting.flag if value else setting.secondary or "--no-" + setting.flag[2:]
                parts.append(flag)
                continue
            for item in value if setting.multiple else (value,):
                parts += [setting.flag, shlex.quote(str(item))]
        return " ".join([*parts, *extra])

    def shape_flags(self) -> str:
        """The shape flags given, as they follow a command that hints repeat (the CLI's leaves them out:
        a shapes hint gives its own; every other hint adds them back with this)."""
        flags = "".join(f" --{flag.replace('_', '-')} {shlex.quote(str(v))}"
                        for flag in ("min_shapes", "opt_shapes", "max_shapes") for v in getattr(self, flag))
        return flags + (f" --shapes {shlex.quote(self.shapes)}" if self.shapes else "")

    def values(self) -> dict[str, Any]:
        """Setting name -> value, as the stages' settings functions and the flag checks read them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def unused_with_prepare_only(self) -> list[str]:
        """The flags given that tune or check an engine, which ``--prepare-only`` does not build: said, not dropped
        in silence (a warning: a spec file shared with full builds may set them)."""
        if not self.prepare_only:
            return []
        return given_flags(self.values(), ENGINE_ONLY)

    def contradictions(self) -> None:
        """Settings that cannot all be obeyed: a usage error (exit 2) naming them, never one silently dropped."""
        if self.timing_cache and self.no_timing_cache:
            raise UsageError("--timing-cache and --no-timing-cache contradict each other")
        if self.precision == "fp32":
            precision_only = given_flags(self.values(), [
                s.name for s in for_command("quantize")
                if s.name not in ("precision", "shapes", "min_precision_share", *SAMPLE_SETTINGS)])
            if precision_only:
                raise UsageError(f"{precision_only[0]} applies to --precision fp16 or int8, not fp32",
                                 hint=f"add --precision fp16 or int8, or drop {precision_only[0]}")

    def target(self, installed: str) -> str:
        """The TensorRT to build for: the one asked for, else ``installed``."""
        return self.trt or installed

    def rewrite_settings(self, target: str) -> RewriteSettings:
        """The rewrite stage's settings: build's rewrite switches, the DCN target and the rules for ``target``."""
        settings = rewrite_settings({**self.values(), "verify": True,
                                     "shapes": None}, target=target)
        # the clean-ups alone are TensorRT's parser's business
        return replace(settings, rules_only=True)

    def quantize_settings(self) -> QuantizeSettings:
        """The precision stage's settings (precision fp16 or int8), as ``quantize`` takes them."""
        precision = "int8" if self.precision == "int8" else "fp16"
        params = self.values()
        if not self.shapes and self.opt_shapes:  # random data's shapes: the first profile's opt, as --shapes gives them
            params["shapes"] = self.opt_shapes[0]
        return quantize_settings(precision, params)

    def plan(self, model: PathLike, output: PathLike, target: str, *, force: bool = False) -> BuildPlan:
        """What the TensorRT builder is told (the profiles and the prepared ONNX's path come later)."""
        pools = list(self.memory_pool) + ([f"workspace:{parse_size(self.workspace)}"] if self.workspace else [])
        return BuildPlan(
            onnx_path=Path(model),  # replaced by the prepared ONNX's path
            engine_path=Path(output),
            precision=self.precision,
            memory_pools=parse_memory_pools(pools),
            timing_cache=TimingCacheChoice(path=self.timing_cache, enabled=not self.no_timing_cache),
            optimization_level=self.opt_level,
            hardware_compat=self.hardware_compat,
            version_compatible=self.version_compatible,
            exclude_lean_runtime=self.exclude_lean_runtime,
            plugin_libraries=tuple(Path(p) for p in self.plugins),
            min_precision_share=self.min_precision_share,
            force=force,
            target=target,
            compute_capabilities=parse_compute_capabilities(list(self.compute_capability)),
        )


def rewrite_settings(params: Mapping[str, Any], target: str | None = None) -> RewriteSettings:
    """RewriteSettings from the declared rewrite settings (``rewrite``'s and ``build``'s, by name), for the
    TensorRT ``target`` where one is known: rules made for some targets only apply there, and DCNv2 becomes the
    plugin-free form where the target loads no plugins (RTX) unless the user chose its form."""
    get = params.get
    dcn_target = get("dcn_target")
    if dcn_target is None and target is not None and not for_target(target).plugins:
        dcn_target = PLUGIN_FREE_DCN
    settings = RewriteSettings(
        shapes=parse_shapes(get("shapes")) if isinstance(get("shapes"), (str, type(None))) else get("shapes"),
        plugin_map=load_plugin_map(get("plugin_map")) if get("plugin_map") else None,
        fold_constants=get("fold", _d("fold")), fold_size_limit=parse_byte_size(get("fold_limit") or _d("fold_limit")),
        int64_to_int32=get("int32", _d("int32")), verify=get("verify", _d("verify")), seed=get("seed") or 0,
        node_tolerance=get("tolerance") if get("tolerance") is not None else _d("tolerance"),
        skip_rules=frozenset(get("skip_rule") or ()))
    if dcn_target is not None:
        spec = trtconv_plugin_spec(get("dcn_plugin_spec")) if dcn_target == "trtconv-plugin" else None
        settings = replace(settings, dcn_target=dcn_target, dcn_plugin=spec)
    return replace(settings, target=target)


SAMPLE_SETTINGS = ("calib_data", "preprocess", "calib_loader", "random_data", "max_samples")  # fp32: profiles


def parse_byte_size(text: str) -> int:
    """``16MiB``, ``500k``, ``1048576`` → bytes (rewrite's --fold-limit)."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "kmg" else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise UsageError(f"bad size {text!r}", hint="write bytes, or a number with k/M/G, e.g. 16M") from None
    if value < 0:
        raise UsageError(f"bad size {text!r}: negative")
    return value


def _held_out(value: str | int | float | None) -> int | float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return float(value) if "." in value else int(value)
    except ValueError as exc:
        raise UsageError(f"--held-out {value!r} is not a count or a fraction", hint="e.g. --held-out 10 or 0.2") \
            from exc


def quantize_settings(precision: str, params: Mapping[str, Any]) -> QuantizeSettings:
    """QuantizeSettings from the shared precision settings (``quantize``'s and ``build``'s, by declared name).

    The same names on both sides; only ``held_out`` and ``shapes`` are parsed here, and the gate
    limits are checked (a malformed one is a usage error before anything is read).
    """
    names = {f.name for f in fields(QuantizeSettings)} - {"precision", "held_out", "shapes"}
    given = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k in names and v is not None}
    settings = QuantizeSettings(precision=precision, held_out=_held_out(params.get("held_out")),  # type: ignore[arg-type]
                                shapes=parse_shapes(params.get("shapes")), **given)
    settings.gate()
    return settings
