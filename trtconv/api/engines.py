"""What the CLI does with a built engine, as the Python API: verify, bench, inspect, Triton, doctor.

Thin re-exports: the stage packages keep the code; the CLI (and a script) reach it here, so
a rename inside a stage package changes this file, not the CLI.
"""

from __future__ import annotations

from trtconv.bench import BenchResult, BenchSettings, bench_engine
from trtconv.inspection import inspect_engine, layer_rows, off_precision
from trtconv.triton import PlanSource, model_name, unservable, write_repository
from trtconv.trt import Environment, TensorRTStatus, probe, probe_driver, problems
from trtconv.verify import VerifyReport, verify_engine

__all__ = [
    # verify: the engine against the ONNX Runtime reference
    "VerifyReport", "verify_engine",
    # bench: timing statistics
    "BenchResult", "BenchSettings", "bench_engine",
    # inspect: what an engine is, the layers that missed the asked precision
    "inspect_engine", "layer_rows", "off_precision",
    # triton-repo: a model repository with one plan per compute capability
    "PlanSource", "model_name", "unservable", "write_repository",
    # doctor: the TensorRT, driver and GPU this machine has, and what is wrong with them
    "Environment", "TensorRTStatus", "probe", "probe_driver", "problems",
]
