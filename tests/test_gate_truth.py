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


def test_many_source_lines_are_distinct_and_one_or_two_per_source(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH.parent / "tests"))
    import numpy as np
    from gate_data import distinct_lines

    pool = [("a", [f"alpha{i}" for i in range(60)]), ("b", [f"beta{i}" for i in range(60)])]
    used: set[str] = set()
    drawn = [distinct_lines(pool, np.random.default_rng([0, s]), used, 1 + s % 2) for s in range(40)]
    lines = [ln for _, ls in drawn for ln in ls]
    assert len(lines) == len(set(lines)) == 60 and all(len(ls) == 1 + s % 2 for s, (_, ls) in enumerate(drawn))
    assert {doc for doc, _ in drawn} == {"a", "b"}


def test_summary_has_one_row_per_model_and_set_with_refusals_per_exit_code(truth):
    def row(samples: int, code: int, seed: int) -> dict:
        t = {"exit": code, "seconds": 1.0, "written": code == 0, "passed": code == 0 or None, "refused": code != 0}
        if code == 0:
            t.update({"unseen_meeting": 0.97, "worst_unseen": 0.9, "holds": True, "int8_share": 1.0})
        return {"model": "cls", "samples": samples, "sources": samples, "seed": seed, "trtconv": t}

    text = truth.summary([row(300, 0, 0), row(300, 11, 1), row(300, 8, 2), row(300, 11, 3), row(600, 11, 0)])
    cls_rows = [ln for ln in text.splitlines() if ln.startswith("| cls")]
    assert len(cls_rows) == 2
    assert "| 1/4 | 1/1 (100%) | 3 (8 ×1, 11 ×2) |" in cls_rows[0] and "| 0/1 | - | 1 (11 ×1) |" in cls_rows[1]


def test_magika_samples_are_what_magika_feeds_its_model(monkeypatch):
    """The file set's features give magika's own label (its ``identify_path``, the whole pipeline) for every
    file drawn; each package is one source, and no two samples are the same bytes."""
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH.parent / "tests"))
    import numpy as np
    import onnxruntime as ort
    from gate_data import file_samples, magika_features
    from magika import Magika

    magika = Magika()
    drawn = list(file_samples(seed=0, sources=12))
    sources = [s for s, _ in drawn]
    assert len(set(sources)) == 12 and all(s.startswith(("deb_", "py_")) for s in sources)
    feats = [x["bytes"] for _, x in drawn]
    assert all(f.shape == (1, 2048) and f.dtype == np.int32 for f in feats)
    assert len({f.tobytes() for f in feats}) == len(feats)
    sess = ort.InferenceSession(str(magika._model_path), providers=["CPUExecutionProvider"])
    labels = magika._model_config.target_labels_space
    checked = 0
    for path in sorted(Path("/etc").glob("*"))[:40]:  # files the test can name, through both routes
        x = magika_features(magika, path) if path.is_file() else None
        if x is None:
            continue
        ours = labels[int(np.argmax(sess.run(None, {"bytes": x})[0][0]))]
        assert ours == str(magika.identify_path(path).dl.label), path
        checked += 1
    assert checked >= 5
