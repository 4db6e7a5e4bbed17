"""The DCN targets ``--dcn-target`` offers: a registry of :class:`~.lowering.DcnTarget` data.

A new target is a module defining its ``DcnTarget`` (emitter, opset or plugin spec, how it is
proven) and one more entry here; nothing else changes.
"""

from __future__ import annotations

from trtconv.errors import UsageError
from trtconv.rewrites.dcn.deformconv import DEFORMCONV
from trtconv.rewrites.dcn.lowering import DcnTarget
from trtconv.rewrites.dcn.plugins import TRT_PLUGIN, TRTCONV_PLUGIN
from trtconv.rewrites.dcn.portable import PORTABLE
from trtconv.rewrites.rewrite_settings import RewriteSettings

TARGETS: dict[str, DcnTarget] = {t.name: t for t in (DEFORMCONV, TRT_PLUGIN, TRTCONV_PLUGIN, PORTABLE)}
DEFAULT_TARGET = RewriteSettings.dcn_target  # the one default lives with the setting


def check_settings(settings: RewriteSettings) -> None:
    """The DCN family's settings: a known target, and the plugin's spec where the target needs one."""
    if settings.dcn_target not in TARGETS:
        raise UsageError(f"unknown DCN target {settings.dcn_target!r}", hint=f"choose one of {', '.join(TARGETS)}")
    if TARGETS[settings.dcn_target].needs_spec and settings.dcn_plugin is None:
        raise UsageError(f"DCN target {settings.dcn_target} needs the plugin's spec",
                         hint="pass --dcn-plugin-spec PATH, or RewriteSettings(dcn_plugin=trtconv_plugin_spec())")
