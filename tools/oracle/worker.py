"""A subprocess that parses (and builds) models with the real TensorRT, one JSON line per event.

Reads ``{"id", "path", "shapes"}`` lines on stdin; writes ``{"id", "phase": "parsed"|"done",
"real": {...}}`` lines on stdout. The "parsed" line comes before the build starts, so when
the builder aborts the process the harness still knows the parse succeeded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trtconv.trt.realparse import import_tensorrt, json_stream, parse_and_build  # noqa: E402


def main() -> int:
    trt = import_tensorrt(os.environ.get("ORACLE_TRT_MODULE") or None)
    if trt is None:
        print(json.dumps({"error": "no TensorRT is importable"}), flush=True)
        return 9
    build = os.environ.get("ORACLE_BUILD", "1") == "1"
    out = json_stream()
    print(json.dumps({"ready": trt.__name__, "version": trt.__version__}), file=out, flush=True)
    for line in sys.stdin:
        job = json.loads(line)

        def emit(phase: str, verdict, job=job) -> None:
            print(json.dumps({"id": job["id"], "phase": phase, "real": verdict.to_json()}), file=out, flush=True)

        verdict = parse_and_build(Path(job["path"]), trt, build=build, shapes=job.get("shapes") or {},
                                  values=job.get("values") or {},
                                  on_parsed=lambda v: emit("parsed", v))
        emit("done", verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
