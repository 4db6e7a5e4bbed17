"""Models, shapes and manifests as the CLI reads them (config files, caches, depfiles).

Thin re-exports of trtconv.load and trtconv.plan, so the CLI imports only trtconv.api.
"""

from __future__ import annotations

from trtconv.load import (
    dims_text,
    disk_bytes,
    file_sha256,
    large_weights,
    load_model,
    parse_shapes,
    return_large_blocks,
)
from trtconv.plan import fixed_shapes_hint, identity_problems, manifest_path, read_manifest, update_manifest

__all__ = [
    # models and shapes: "x:1x3x224x224", sizes on disk, content hashes, memory returned after a stage (large models)
    "dims_text", "disk_bytes", "file_sha256", "large_weights", "load_model", "parse_shapes", "return_large_blocks",
    # a command's hint where an input needs one shape: the command with a --shapes its graph runs at
    "fixed_shapes_hint",
    # the manifest next to each engine (what was asked, what came out, the identity hash)
    "identity_problems", "manifest_path", "read_manifest", "update_manifest",
]
