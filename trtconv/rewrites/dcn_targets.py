"""The DCN targets ``--dcn-target`` offers: a registry of :class:`~.dcn_target.DcnTarget` data.

A new target is a module defining its ``DcnTarget`` (emitter, opset or plugin spec, how it is
proven) and one more entry here; nothing else changes.
"""

from __future__ import annotations

from trtconv.rewrites.dcn_deformconv import DEFORMCONV
from trtconv.rewrites.dcn_plugins import TRT_PLUGIN, TRTCONV_PLUGIN
from trtconv.rewrites.dcn_portable import PORTABLE
from trtconv.rewrites.dcn_target import DcnTarget

TARGETS: dict[str, DcnTarget] = {t.name: t for t in (DEFORMCONV, TRT_PLUGIN, TRTCONV_PLUGIN, PORTABLE)}
DEFAULT_TARGET = DEFORMCONV.name
