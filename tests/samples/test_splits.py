"""Splits that cannot flatter (issue 32, Deliver 1): a seeded random draw that keeps a source together.

Files in several folders: a folder is a source; all files in one folder: each file is its own; an .npz key
``trtconv_group`` names the source instead. A source's samples land in one part, never two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtconv.samples import GROUP_KEY, SampleSet, SampleSource, model_inputs, split_samples


def _model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _set(path: Path) -> SampleSet:
    return SampleSet(SampleSource.detect(path), model_inputs(_model()))


def _parts(split) -> list[set[int]]:
    return [set(p.indices()) if p is not None else set() for p in (split.calibration, split.selection, split.judging)]


def test_a_source_folder_stays_in_one_part_and_the_draw_is_seeded(tmp_path):
    rng = np.random.default_rng(0)
    for s in range(10):  # ten sources of 1..5 variants each, named so that sorting clusters them
        (tmp_path / f"source{s}").mkdir()
        for v in range(1 + s % 5):
            np.save(tmp_path / f"source{s}" / f"v{v}.npy", rng.standard_normal((1, 4)).astype(np.float32))
    samples = _set(tmp_path)
    groups = samples.groups()
    assert len(set(groups)) == 10 and len(groups) == len(samples) == 30
    split = split_samples(samples, judging=10, selection=6, seed=0)
    parts = _parts(split)
    assert set().union(*parts) == set(range(30)) and sum(map(len, parts)) == 30  # disjoint, complete
    for g in set(groups):
        members = {i for i, x in enumerate(groups) if x == g}
        assert sum(bool(members & p) for p in parts) == 1, g  # the whole source in exactly one part
    assert len(parts[2]) >= 10 and len(parts[1]) >= 6 and parts[0]
    assert _parts(split_samples(samples, 10, 6, seed=0)) == parts  # seeded: the same draw again
    assert any(_parts(split_samples(samples, 10, 6, seed=s))[2] != parts[2] for s in range(1, 4))
    # not the last files in order: the judged sources are not simply the last ones by name
    assert any(_parts(split_samples(samples, 10, 6, seed=s))[2] != set(range(20, 30)) for s in range(4))
    judged = list(split.judging)  # the parts stream their own samples
    assert len(judged) == len(parts[2]) and set(judged[0]) == {"x"}


def test_files_in_one_folder_are_each_their_own_source(tmp_path):
    for i in range(12):
        np.save(tmp_path / f"{i:03d}.npy", np.full((1, 4), i, np.float32))
    samples = _set(tmp_path)
    assert len(set(samples.groups())) == 12
    split = split_samples(samples, judging=4, selection=0, seed=3)
    assert split.selection is None and len(split.judging) == 4 and len(split.calibration) == 8
    values = sorted(int(s["x"][0, 0]) for s in split.judging)
    assert values == sorted(split.judging.indices())  # the samples streamed are the ones picked


def test_an_npz_group_key_keeps_its_samples_together_and_is_not_an_input(tmp_path):
    arrays = {}
    for i in range(12):
        arrays[f"{i:03d}/x"] = np.full((1, 4), i, np.float32)
        arrays[f"{i:03d}/{GROUP_KEY}"] = np.array(f"page{i // 3}")  # four pages of three lines
    np.savez(tmp_path / "lines.npz", **arrays)
    samples = _set(tmp_path / "lines.npz")
    groups = samples.groups()
    assert len(set(groups)) == 4 and groups[0] == groups[2] != groups[3]
    for seed in range(5):
        parts = _parts(split_samples(samples, judging=3, selection=3, seed=seed))
        for page in range(4):
            lines = {3 * page, 3 * page + 1, 3 * page + 2}
            assert sum(bool(lines & p) for p in parts) == 1
    assert all(set(s) == {"x"} for s in samples)  # the key names the source; it is not fed to the model
