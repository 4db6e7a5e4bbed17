"""A Triton Inference Server model repository from trtconv engines: ``config.pbtxt`` + ``1/model.plan``.

``config`` writes the model configuration (pure: from the bindings and profiles a manifest
records); ``repository`` lays out the folder, one plan per compute capability when engines
built for several GPUs are gathered (Triton's ``cc_model_filenames``).
"""

from trtconv.triton.model_config import TRITON_TYPES, batching, config_pbtxt
from trtconv.triton.repository import PlanSource, model_name, unservable, write_repository

__all__ = ["TRITON_TYPES", "PlanSource", "batching", "config_pbtxt", "model_name", "unservable",
           "write_repository"]
