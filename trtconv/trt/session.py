"""What building and running an engine both need: TensorRT's log bridged to Python logging, plugins loaded.

Its own module so that ``builder`` (which deserializes what it built) and ``engine`` (which
loads plugins before deserializing) both import it instead of each other.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trtconv.errors import BackendUnavailableError
from trtconv.trt.cancel import Cancel

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt

log = logging.getLogger(__name__)


TRT_LOGGER = "trtconv.tensorrt"  # TensorRT's own lines: the CLI marks them ``trtconv: tensorrt warning: ...``


def _like(message: str) -> str:
    """Messages that differ only in numbers or quoted names are "like" each other."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message))


class LogRepeats:
    """TensorRT's warnings shown once each, repeats counted (an INT8 build repeats one line per
    layer: 238 of 282 lines of a CI log): :meth:`report` says how many more there were. With -v
    (INFO enabled) every line is shown and nothing is counted."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, str]] = {}  # key -> (level, the first such message)
        self.more: dict[str, int] = {}

    def repeated(self, level: int, message: str) -> bool:
        """True (and counted) if a message like this one was shown already."""
        if level < logging.WARNING or logging.getLogger(TRT_LOGGER).isEnabledFor(logging.INFO):
            return False
        key = _like(message)
        if key not in self.first:
            self.first[key] = (level, message)
            return False
        self.more[key] = self.more.get(key, 0) + 1
        return True

    def report(self) -> None:
        """One line per repeated message, then start counting afresh."""
        for key, count in self.more.items():
            level, message = self.first[key]
            logging.getLogger(TRT_LOGGER).log(
                level, "(and %d more like %r; -v shows all)", count, message[:120])
        self.first.clear()
        self.more.clear()


PROFILE_FAULT = "values are not self-consistent"  # TensorRT's builder, on a profile corner the graph cannot take


class LogBridge:
    """TensorRT's log → Python logging (TensorRT's INFO is chatty: shown with -v)."""

    @staticmethod
    def make(errors: list[str] | None = None, cancel: Cancel | None = None,
             repeats: LogRepeats | None = None, profile_faults: list[str] | None = None) -> trt.ILogger:
        """``errors`` (if given) collects every ERROR/INTERNAL_ERROR message, for one clear failure line:
        they are then shown only with -v (the caller reports them once). ``repeats`` (if given)
        shows each warning once and counts the rest. A Ctrl-C that lands in this callback cannot
        unwind through TensorRT: it goes to ``cancel``. ``profile_faults`` (if given) collects the
        builder's "Profile kMAX values are not self-consistent" warnings: a profile corner the graph
        cannot take (the caller stops the build and says so)."""
        levels = {
            trt.ILogger.Severity.INTERNAL_ERROR: logging.ERROR,
            trt.ILogger.Severity.ERROR: logging.ERROR,
            trt.ILogger.Severity.WARNING: logging.WARNING,
            trt.ILogger.Severity.INFO: logging.INFO,
            trt.ILogger.Severity.VERBOSE: logging.DEBUG,
        }
        trt_log = logging.getLogger(TRT_LOGGER)

        class Bridge(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
                try:
                    level = levels.get(severity, logging.INFO)
                    if cancel is not None and cancel.requested:
                        level = min(level, logging.INFO)  # "build canceled by user": what was asked, not an error
                    text = msg.strip()
                    if profile_faults is not None and PROFILE_FAULT in text:
                        profile_faults.append(text)
                        return  # the caller's error names it
                    if errors is not None and level >= logging.ERROR:
                        errors.append(text)
                        if not trt_log.isEnabledFor(logging.INFO):
                            return  # the caller reports it once (its error message); -v shows it as it comes
                    if repeats is None or not repeats.repeated(level, text):
                        trt_log.log(level, "%s", text)
                except KeyboardInterrupt:
                    if cancel is None:
                        raise
                    cancel.request()

        return Bridge()


def load_plugins(logger: trt.ILogger, libraries: tuple[Path, ...],
                 creators: dict[str, list[str]] | None = None) -> list[str]:
    """TensorRT's own plugin library, extra libraries, and trtconv's plugins, in that order.

    ``creators`` (if given) receives, per library, the plugin creators its load registered
    (``name/version/namespace``): the manifest records them as part of the engine's identity."""
    if not trt.init_libnvinfer_plugins(cast(Any, logger), ""):
        log.warning("TensorRT's plugin library (libnvinfer_plugin) did not initialise")
    registry = trt.get_plugin_registry()
    loaded = []
    for lib in libraries:
        before = _creators(registry) if creators is not None else set()
        handle = registry.load_library(str(lib))
        if handle is None:
            raise BackendUnavailableError(
                f"TensorRT could not load plugin library {lib}",
                hint="check that it was built for this TensorRT and CUDA version, and that its creators "
                "are not already registered",
            )
        loaded.append(str(lib))
        if creators is not None:
            creators[str(lib)] = sorted(_creators(registry) - before)
    return loaded + list(register_trtconv_plugins())


def _creators(registry: trt.IPluginRegistry) -> set[str]:
    """Every registered creator as ``name/version/namespace`` (V2 and V3 creators both have these)."""
    found = set()
    for creator in registry.all_creators:
        parts = [getattr(creator, a, None) for a in ("name", "plugin_version", "plugin_namespace")]
        if parts[0] is not None:  # a creator interface the bindings cannot describe is left out
            found.add("/".join(str(p or "") for p in parts))
    return found


TRTCONV_PLUGIN_MODULES = ("trtconv.trt.plugins.dcnv2", "trtconv.trt.dcnv2_plugin")


@functools.cache
def register_trtconv_plugins() -> tuple[str, ...]:
    """trtconv's own plugins (``tensorrt.plugin`` definitions), registered once per process.

    A plugin module exposes ``ensure_registered()`` (idempotent) and ``PLUGIN_ID``, or
    ``register_plugins() -> list[str]``. Modules not in this installation are skipped."""

    names: list[str] = []
    for mod_name in TRTCONV_PLUGIN_MODULES:
        try:
            if importlib.util.find_spec(mod_name) is None:
                continue
        except ModuleNotFoundError:
            continue
        mod = importlib.import_module(mod_name)
        register = getattr(mod, "register_plugins", None)
        ensure = getattr(mod, "ensure_registered", None)
        if callable(register):
            names += [str(n) for n in register()]
        elif callable(ensure):
            ensure()
            names.append(str(getattr(mod, "PLUGIN_ID", mod_name)))
    return tuple(names)
