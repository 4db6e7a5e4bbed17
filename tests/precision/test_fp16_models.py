"""FP16 on real models with real weights and realistic inputs, judged by what their users compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from realdata import ocr_det_images, ocr_line_images, silero_samples, speech_like

from trtconv.precision.fp16 import Fp16AccuracyError, Fp16Result, Fp16Settings, convert_fp16
from trtconv.reference import ort
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs

NAIVE = Fp16Settings(fold_batchnorm=False, max_initializer=None, max_activation=None)


def _images(model: onnx.ModelProto, folder: Path, preset: str) -> list[dict[str, np.ndarray]]:
    source = SampleSource.detect(folder, ImagePreprocess.preset(preset))
    return list(SampleSet(source, model_inputs(model)))


def _convert(model, settings, samples) -> Fp16Result:
    """The result even when the accuracy check refuses it (the naive conversion)."""
    try:
        return convert_fp16(model, settings, samples)
    except Fp16AccuracyError as err:
        return err.result


def _run(model: onnx.ModelProto, samples) -> list[dict[str, np.ndarray]]:
    sess = ort.session(model)
    return [ort.run(sess, s) for s in samples]


def test_ocr_det_batchnorm_trap_naive_is_garbage_ours_is_accurate(ocr_det, tmp_path):
    """PP-OCRv4 det has a BatchNormalization with running variance ~1e8: all-FP16 turns it into Inf."""
    m = onnx.load(str(ocr_det))
    samples = _images(m, ocr_det_images(tmp_path, range(2))[0].parent, "ppocr-det")
    ref = _run(m, samples)
    naive = _convert(m, NAIVE, samples)
    ours = convert_fp16(m, Fp16Settings(), samples)
    assert ours.report.folded_batchnorms, "the BatchNorm after the Conv must be folded"
    assert ours.report.passed
    onnx.checker.check_model(ours.model, full_check=True)

    def mask_iou(outs):  # DBNet post-processing binarizes the probability map at 0.3
        ious = []
        for r, o in zip(ref, outs):
            a, b = r["sigmoid_0.tmp_0"] > 0.3, o["sigmoid_0.tmp_0"] > 0.3
            ious.append(np.logical_and(a, b).sum() / max(1, np.logical_or(a, b).sum()))
        return min(ious)

    assert all(r["sigmoid_0.tmp_0"][0, 0].mean() > 0.005 for r in ref), "the images must contain text"
    naive_stats, our_stats = naive.report.accuracy[0], ours.report.accuracy[0]
    assert naive_stats.cosine < 0.95 and naive_stats.max_abs > 0.5
    assert our_stats.cosine > 0.9999 and our_stats.mean_abs < 1e-3 and our_stats.nonfinite == 0
    naive_iou, our_iou = mask_iou(_run(naive.model, samples)), mask_iou(_run(ours.model, samples))
    assert naive_iou < 0.8 and our_iou > 0.97, (naive_iou, our_iou)
    # folding switched off, the rules keep the trap in FP32 instead, and it is still accurate
    unfolded = convert_fp16(m, Fp16Settings(fold_batchnorm=False), samples[:1])
    rules = {k.name: k.rule for k in unfolded.report.kept}
    assert rules.get("p2o.BatchNormalization.1") == "initializer-range"
    assert unfolded.report.accuracy[0].cosine > 0.9999


def _ctc_greedy(probs: np.ndarray) -> list[list[int]]:
    out = []
    for row in probs.argmax(-1):
        seq, prev = [], -1
        for k in row:
            if k != prev and k != 0:
                seq.append(int(k))
            prev = k
        out.append(seq)
    return out


def test_ocr_rec_reads_the_same_text(ocr_rec, tmp_path):
    m = onnx.load(str(ocr_rec))
    samples = _images(m, ocr_line_images(tmp_path, range(2))[0].parent, "ppocr-rec")
    res = convert_fp16(m, Fp16Settings(), samples)
    stats = res.report.accuracy[0]
    assert stats.cosine > 0.999 and stats.nonfinite == 0
    assert res.report.converted > 0.95 * res.report.float_nodes
    for r, o in zip(_run(m, samples), _run(res.model, samples)):
        ref_text, fp16_text = _ctc_greedy(r["softmax_11.tmp_0"]), _ctc_greedy(o["softmax_11.tmp_0"])
        assert len(ref_text[0]) >= 3
        assert fp16_text == ref_text


def test_ocr_cls_same_angle_decisions(ocr_cls, tmp_path):
    m = onnx.load(str(ocr_cls))
    samples = _images(m, ocr_line_images(tmp_path, range(4), flip_every=2)[0].parent, "ppocr-cls")
    res = convert_fp16(m, Fp16Settings(), samples)
    assert res.report.accuracy[0].max_abs < 0.02
    ref = [r["save_infer_model/scale_0.tmp_1"].argmax(-1) for r in _run(m, samples)]
    got = [o["save_infer_model/scale_0.tmp_1"].argmax(-1) for o in _run(res.model, samples)]
    assert [int(r[0]) for r in ref] == [1, 0, 1, 0]  # flipped lines are "180"
    assert got == ref


@pytest.fixture(scope="module")
def silero_fp16(silero):
    m = onnx.load(str(silero))
    samples = silero_samples(silero, range(1), seconds=2.0, every=4)
    return m, convert_fp16(m, Fp16Settings(), samples)


def test_silero_if_subgraphs_are_converted(silero_fp16):
    m, res = silero_fp16
    by_graph = res.report.converted_by_graph
    inside = {g: n for g, n in by_graph.items() if g != "main"}
    assert sum(inside.values()) > 100, by_graph  # the network lives in If branches
    assert any("then_branch" in g for g in inside) and any("else_branch" in g for g in inside)
    assert all(s.nonfinite == 0 for s in res.report.accuracy)
    onnx.checker.check_model(res.model, full_check=True)
    convs = [n for g in _graphs(res.model.graph) for n in g.node if n.op_type == "Conv"]
    assert convs
    init16 = [t for g in _graphs(res.model.graph) for t in g.initializer if t.data_type == onnx.TensorProto.FLOAT16]
    consts16 = [n for g in _graphs(res.model.graph) for n in g.node
                if n.op_type == "Constant" and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT16]
    assert len(init16) + len(consts16) >= len(convs)  # the weights inside the branches are FP16


def test_silero_streaming_probabilities_match(silero_fp16):
    """Run both models the way silero-vad does (state fed back), each on its own state."""
    m, res = silero_fp16
    audio = speech_like(7, seconds=2.0)
    sessions = [ort.session(m), ort.session(res.model)]
    states = [np.zeros((2, 1, 128), np.float32) for _ in sessions]
    context = np.zeros((1, 64), np.float32)
    probs: list[list[float]] = [[], []]
    for start in range(0, len(audio) - 511, 512):
        x = np.concatenate([context, audio[None, start:start + 512]], axis=1)
        for i, sess in enumerate(sessions):
            out = ort.run(sess, {"input": x, "state": states[i], "sr": np.array(16000, np.int64)})
            states[i] = out["stateN"]
            probs[i].append(float(out["output"].ravel()[0]))
        context = x[:, -64:]
    ref, got = np.array(probs[0]), np.array(probs[1])
    assert ref.max() > 0.5 and ref.min() < 0.2, "the signal must contain speech and pauses"
    assert np.abs(ref - got).max() < 0.02
    assert np.array_equal(ref > 0.5, got > 0.5)


def _graphs(g):
    from trtconv.onnxutil.walk import iter_graphs

    return list(iter_graphs(g))
