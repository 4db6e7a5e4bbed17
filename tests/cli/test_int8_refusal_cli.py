"""A refusal with its numbers (issue 32, Deliver 3; issue 35, point 6): exit 7 prints, and ``--json`` carries,
the per-layer sensitivity behind it and the INT8 share it was judged at. (Exit 8: test_int8_share_cli.)"""

from __future__ import annotations

import json

from click.testing import CliRunner
from realdata import ocr_line_images

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


def test_exit_7_json_and_text_carry_the_per_layer_numbers(ocr_cls, tmp_path):
    ocr_line_images(tmp_path / "lines", range(8), flip_every=2)
    args = ["quantize", str(ocr_cls), "-o", str(tmp_path / "q.onnx"), "--precision", "int8", "--int8-unverified",
            "--calib-data", str(tmp_path / "lines"), "--preprocess", "preset=ppocr-cls", "--calib-method", "entropy",
            "--max-abs", "1e-12", "--no-auto-exclude"]
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == ExitCode.ACCURACY, res.output
    doc = json.loads(res.stdout)
    assert doc["error"]["exit_code"] == 7 and doc["error"]["name"] == "ACCURACY" and doc["written"] is False
    rows = doc["int8"]["sensitivity"]
    assert rows and all({"node", "op_type", "nmse", "cosine", "excluded"} <= set(r) for r in rows)
    assert doc["int8_share"] > 0.9 and doc["violations"]
    assert not (tmp_path / "q.onnx").exists()
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == ExitCode.ACCURACY
    assert rows[0]["node"] in text.stdout and "error each quantized layer adds" in text.stdout
    assert f"INT8 share: {doc['int8_share']:.0%}" in text.stdout and "FAILED:" in text.stdout
