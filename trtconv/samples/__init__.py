"""Layer samples: where input data comes from (npz/npy files, image folders, random draws), shaped for a model."""

from trtconv.samples.images import preprocess_warnings
from trtconv.samples.sources import (
    GROUP_KEY,
    ImagePreprocess,
    SampleSet,
    SampleSource,
    iter_samples_with_origin,
    model_inputs,
    sample_count,
    sample_groups,
)
from trtconv.samples.splits import Split, draw_parts, split_samples

__all__ = [
    "GROUP_KEY",
    "ImagePreprocess",
    "SampleSet",
    "SampleSource",
    "iter_samples_with_origin",
    "model_inputs",
    "preprocess_warnings",
    "Split",
    "draw_parts",
    "sample_count",
    "sample_groups",
    "split_samples",
]
