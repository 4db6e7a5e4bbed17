"""Every user-facing setting, declared once: name, type, default, help, commands, aliases.

The click options (``trtconv.cli.options.option``), the spec-file keys (the command's long
flag names, ``trtconv.cli.config``) and the Python API's settings objects
(``trtconv.api.BuildSettings``, ``QuantizeSettings``) are derived from or checked against
these declarations (tests/cli/test_settings_tree.py), so a setting has one name — kebab-case
on the command line and in a spec file, snake_case in Python — and one default.

This package sits just above ``trtconv.errors`` and imports nothing else of trtconv, so
every layer (plan, pipeline, api, cli) can read the same defaults.
"""

from trtconv.settings.declare import (
    COMMANDS,
    DEFAULT_TARGET,
    INT8_ONLY,
    INT8_SPLIT,
    NEWEST_TENSORRT,
    RTX_TARGET,
    SETTINGS,
    TRT_TARGETS,
    Setting,
    declared,
    for_command,
    given_flags,
)

__all__ = ["COMMANDS", "DEFAULT_TARGET", "INT8_ONLY", "INT8_SPLIT", "NEWEST_TENSORRT", "RTX_TARGET", "SETTINGS", "TRT_TARGETS",
           "Setting", "declared", "for_command", "given_flags"]
