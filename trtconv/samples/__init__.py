"""Layer samples: where input data comes from (npz/npy files, image folders, random draws), shaped for a model."""

from trtconv.samples.sources import (
    ImagePreprocess,
    SampleSet,
    SampleSource,
    iter_samples_with_origin,
    model_inputs,
    sample_count,
)

__all__ = [
    "ImagePreprocess",
    "SampleSet",
    "SampleSource",
    "iter_samples_with_origin",
    "model_inputs",
    "sample_count",
]
