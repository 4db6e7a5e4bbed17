"""The child process of ``trtconv.trt.failing_node``: build one prefix graph, say by exit code whether an
engine came out. A process of its own, so a builder that crashes on a prefix is a failed build, and
silent: what the builder and its compiler print goes nowhere (the parent reports the first build's words).

    python -m trtconv.trt.prefix_build TICKET   # TICKET: a pickled (BuildPlan, Flavour)
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtconv.plan import BuildPlan
from trtconv.trt.builder import configure, open_network
from trtconv.trt.failing_node import BUILT, NOT_BUILT, NOT_PARSED, NOT_SET_UP
from trtconv.trt.flavour import Flavour, active

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt


def build_prefix(plan: BuildPlan, flavour: Flavour) -> int:
    """BUILT when the builder returns an engine of ``plan``, NOT_BUILT when it returns none."""
    with active(flavour):
        logger: Any = trt.Logger(trt.Logger.INTERNAL_ERROR)
        builder, network, parser, _ = open_network(logger, plan, flavour)
        if not parser.parse_from_file(str(plan.onnx_path)):
            return NOT_PARSED
        try:
            config = configure(builder, network, plan, None, flavour)
        except Exception:  # noqa: BLE001 - a prefix the builder cannot be set up for tells nothing
            return NOT_SET_UP
        return BUILT if builder.build_serialized_network(network, config) is not None else NOT_BUILT


def main(ticket: str) -> int:
    quiet = os.open(os.devnull, os.O_WRONLY)  # Myelin writes to the descriptors, not through the logger
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    plan, flavour = pickle.loads(Path(ticket).read_bytes())
    return build_prefix(plan, flavour)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
