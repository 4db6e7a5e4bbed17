"""benchmarks/int8_gate_truth.py's split: random (seeded), about half the samples, and never a source cut in two,
so that no calibration sample has a near-twin among the unseen ones."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def truth(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import int8_gate_truth

    return int8_gate_truth


def test_split_keeps_each_source_whole_and_halves_the_samples(truth):
    counts = {f"doc{i:02d}": n for i, n in enumerate([8, 8, 3, 12, 8, 5, 8, 8, 1, 9, 8, 8, 7, 8, 8])}
    total = sum(counts.values())
    for seed in range(20):
        calib, unseen = truth.source_split(counts, seed)
        assert set(calib).isdisjoint(unseen) and set(calib) | set(unseen) == set(counts)
        assert abs(sum(counts[s] for s in calib) - total / 2) <= max(counts.values())
    splits = {tuple(truth.source_split(counts, seed)[0]) for seed in range(20)}
    assert len(splits) > 10  # drawn at random, not the first sources by name
    assert truth.source_split(counts, 3) == truth.source_split(counts, 3)


def test_split_of_two_sources_leaves_both_halves_something(truth):
    for seed in range(5):
        calib, unseen = truth.source_split({"a": 90, "b": 10}, seed)
        assert len(calib) == 1 and len(unseen) == 1


def test_calibration_folder_has_one_subfolder_per_source(truth, tmp_path):
    data = tmp_path / "data"
    for source, n in (("page1", 2), ("page2", 3), ("photo", 1)):
        (data / source).mkdir(parents=True)
        for i in range(n):
            (data / source / f"{i:03d}.npz").write_bytes(b"x")
    sources = truth.sources_of(data)
    assert {k: len(v) for k, v in sources.items()} == {"page1": 2, "page2": 3, "photo": 1}
    cal = truth.calib_folder(tmp_path / "cal", sources, ["page2", "photo"])
    assert sorted(str(p.relative_to(cal)) for p in cal.rglob("*.npz")) == [
        "page2/000.npz", "page2/001.npz", "page2/002.npz", "photo/000.npz"]
