"""Regenerate the per-version support tables in ``trtconv/analyze/data/`` from the recorded facts.

Run ``python -m trtconv.analyze.maketables SOURCE.tsv`` where SOURCE is the 10.15 parser
table (onnx-tensorrt ``docs/operators.md`` as TSV). The version deltas below come from
NVIDIA release notes / changelogs and the plugin registry diff; each carries its source,
and every generated row says where it came from. The tables are data: ``check`` reads
them, it never branches on a version number.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from trtconv.analyze.corrections import Correction, corrections_for

DATA_DIR = Path(__file__).parent / "data"
COLUMNS = ("op_type", "domain", "status", "types", "params", "since", "source", "restrictions")

OPS_SOURCE = "onnx-tensorrt docs/operators.md (TensorRT 10.15, opset 9-24)"
OPS_APPLIED = {
    "10.16": OPS_SOURCE + "; no 10.16 table published, 10.15 rows assumed unchanged",
    "11.4": OPS_SOURCE + "; no 11.x table published, 10.15 rows plus the 11.x deltas",
    "rtx": OPS_SOURCE + "; TensorRT-RTX 1.7 shares the 11.x parser: 11.x rows minus its plugins, corrected by "
                        "measurement",
}
VERSIONS = ("10.16", "11.4", "rtx")
# The parser table the rows start from: a TSV copy of onnx-tensorrt docs/operators.md (10.15).
DEFAULT_SOURCE = DATA_DIR / "onnx-trt-operators-10.15.tsv"
CHANGELOG_11_0 = "NVIDIA/TensorRT CHANGELOG.md 11.0 GA"
NOTES_11_2_1 = "TensorRT 11.2.1 release notes"
PLUGIN_DIFF = "NVIDIA/TensorRT plugin/api/inferPlugin.cpp release/10.16 vs main (11.1); 11.0 OSS commit 771d8efd"
PLUGIN_LIST = "NVIDIA/TensorRT plugin/api/inferPlugin.cpp (11.1 registered creators) and plugin/README.md"

# Restriction text of the 10.15 table -> machine-checkable parameters for the rule functions
# in trtconv/analyze/rules.py (keyed by op type). Written by reading each restriction.
PARAMS: dict[str, str] = {
    "AveragePool": "ranks=4|5",
    "MaxPool": "ranks=4|5;unsupported_outputs=1",
    "LpPool": "",
    "TopK": "max_k=3840",
    "Resize": (
        "coordinate_transformation_mode=half_pixel|pytorch_half_pixel|tf_half_pixel_for_nn|asymmetric|align_corners;"
        "mode=nearest|linear;nearest_mode=floor|ceil|round_prefer_floor|round_prefer_ceil;"
        "keep_aspect_ratio_policy=stretch"
    ),
    "DeformConv": "ranks=3|4;plugin=ModulatedDeformConv2d",
    "RoiAlign": "plugin=ROIAlign_TRT",
    "GridSample": "ranks=4",
    "LayerNormalization": "unsupported_outputs=1|2",
    "ScatterND": "reduction=none",
    "LSTM": "layout=0",
    "GRU": "layout=0",
    "RNN": "layout=0",
    "Attention": "unsupported_inputs=4|5|6;unsupported_outputs=1|2|3",
    "NonZero": "data_dependent=1",
    "NonMaxSuppression": "data_dependent=1",
}
for _op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
            "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"):
    PARAMS[_op] = "const_inputs=1"
for _op in ("Squeeze", "Unsqueeze"):
    PARAMS[_op] = "const_inputs=1"
PARAMS["CumSum"] = "const_inputs=1"
PARAMS["OneHot"] = "const_inputs=1"
PARAMS["STFT"] = "const_inputs=1|2"
PARAMS["Dropout"] = "const_inputs=2"

TYPE_NAMES = {"FP32", "FP16", "BF16", "FP8", "FP4", "INT4", "INT8", "INT32", "INT64", "UINT8", "BOOL", "DOUBLE"}


@dataclass(frozen=True)
class Row:
    op_type: str
    domain: str
    status: str  # supported | unsupported | builtin-plugin | deprecated-plugin | removed-plugin
    types: str
    params: str
    since: str
    source: str
    restrictions: str

    def cells(self) -> list[str]:
        return [getattr(self, c) for c in COLUMNS]


def _types(text: str) -> str:
    parts = [p.strip() for p in text.split(",")]
    return ",".join(p for p in parts if p in TYPE_NAMES)


def _ops_rows(source: Path, version: str) -> list[Row]:
    rows = []
    with open(source, newline="") as fh:
        for rec in csv.DictReader(fh, delimiter="\t"):
            op, flag = rec["operator"].strip(), rec["supported"].strip()
            if flag not in ("Y", "N"):
                continue  # the 11.x-only rows of the facts file are added as deltas below
            rows.append(Row(op, "", "supported" if flag == "Y" else "unsupported", _types(rec["supported_types"]),
                            PARAMS.get(op, ""), "", OPS_APPLIED[version], rec["restrictions"].strip()))
    return rows


# 11.x deltas: (op_type, domain, change, source)
DELTAS_11 = [
    Row("Swish", "", "supported", "", "", "11.0", CHANGELOG_11_0 + ": 'Added support for Swish operator'", ""),
    Row("TRT_Attention", "*", "supported", "", "", "11.0", CHANGELOG_11_0 + ": custom operators TRT_Attention, TRT_MoE, TRT_KVCacheUpdate", ""),
    Row("TRT_MoE", "*", "supported", "", "", "11.0", CHANGELOG_11_0 + ": custom operators TRT_Attention, TRT_MoE, TRT_KVCacheUpdate", ""),
    Row("TRT_KVCacheUpdate", "*", "supported", "", "", "11.0", CHANGELOG_11_0 + ": custom operators TRT_Attention, TRT_MoE, TRT_KVCacheUpdate", ""),
]
OVERRIDES_11 = {
    "DFT": dict(status="supported", since="11.2.1", params="plugin=DFT (cuFFT)",
                source=NOTES_11_2_1 + ": cuFFT-based plugin for the ONNX DFT operator"),
    "GridSample": dict(params="ranks=4|5", since="11.2.1", source=NOTES_11_2_1 + ": 3D GridSample (rank-5 input)",
                       restrictions="Input must be 4D or 5D."),
}

REMOVED_IN_11 = ["BatchTilePlugin_TRT", "BatchedNMS_TRT", "BatchedNMSDynamic_TRT", "Clip_TRT", "CoordConvAC",
                 "CropAndResize", "EfficientNMS_ONNX_TRT", "LReLU_TRT", "NMS_TRT", "NMSDynamic_TRT",
                 "Normalize_TRT", "Proposal", "ProposalDynamic", "SpecialSlice_TRT", "Split",
                 "CustomGeluPluginDynamic"]
KEPT_IN_11 = ["CropAndResizeDynamic", "DecodeBbox3DPlugin", "DetectionLayer_TRT", "EfficientNMS_TRT",
              "EfficientNMS_Explicit_TF_TRT", "EfficientNMS_Implicit_TF_TRT", "FlattenConcat_TRT",
              "GenerateDetection_TRT", "GridAnchor_TRT", "GridAnchorRect_TRT", "InstanceNormalization_TRT",
              "ModulatedDeformConv2d", "MultilevelCropAndResize_TRT", "MultilevelProposeROI_TRT",
              "MultiscaleDeformableAttnPlugin_TRT", "PillarScatterPlugin", "PriorBox_TRT", "ProposalLayer_TRT",
              "PyramidROIAlign_TRT", "Region_TRT", "Reorg_TRT", "ResizeNearest_TRT", "ROIAlign_TRT", "RPROI_TRT",
              "ScatterElements", "ScatterND", "VoxelGeneratorPlugin"]
DEPRECATED = {
    "EfficientNMS_TRT": "deprecated since 10.12, use ONNX NonMaxSuppression (INMSLayer)",
}
# ModulatedDeformConv2d is not listed: only its version 1 is deprecated (since 10.11), and the
# plugin-version rule in rules.py reports exactly the nodes that would bind version 1.
NEW_IN_11 = {"TopkLastDim": "11.1"}
REPLACEMENT = "use ONNX NonMaxSuppression (INMSLayer)"


def _plugin_rows(version: str) -> list[Row]:
    rows = []
    for name in KEPT_IN_11:
        status = "deprecated-plugin" if name in DEPRECATED else "builtin-plugin"
        rows.append(Row(name, "*", status, "", "", "", PLUGIN_LIST, DEPRECATED.get(name, "")))
    for name in REMOVED_IN_11:
        if version.startswith("10."):
            rows.append(Row(name, "*", "deprecated-plugin", "", "", "", PLUGIN_DIFF + " (still registered in 10.16)",
                            "deprecated; removed in TensorRT 11"))
        else:
            hint = REPLACEMENT if "NMS" in name else "no replacement in libnvinfer_plugin"
            rows.append(Row(name, "*", "removed-plugin", "", "", "11.0", PLUGIN_DIFF, f"removed in TensorRT 11; {hint}"))
    if not version.startswith("10."):
        for name, since in NEW_IN_11.items():
            rows.append(Row(name, "*", "builtin-plugin", "", "", since, PLUGIN_LIST, ""))
    return rows


# TensorRT-RTX (1.7.1.116, measured with its real parser and builder on a CPU-only machine;
# docs in ../shared/docs/trt-rtx-facts.md): no plugin library and no loadable plugins, so every
# plugin-backed importer fails ("Plugin not found"); a few importers fail at ahead-of-time build.
RTX_MEASURED = "TensorRT-RTX 1.7.1.116 parser/builder, measured on a CPU-only machine"
RTX_NO_PLUGINS = "TensorRT-RTX has no plugin library and loads no plugins (NVIDIA/TensorRT-RTX issue 4)"
OVERRIDES_RTX = {
    "DeformConv": dict(status="unsupported", params="", source=RTX_MEASURED + ": 'Plugin not found'",
                       restrictions="imported as the ModulatedDeformConv2d plugin, which " + RTX_NO_PLUGINS
                       + "; rewrite DCN to standard ONNX operators"),
    "DFT": dict(status="unsupported", params="", source=RTX_MEASURED,
                restrictions="imported as a cuFFT plugin; " + RTX_NO_PLUGINS),
    "NonZero": dict(status="unsupported", params="", source=RTX_MEASURED + ": 'NonZero plugin creator version 1 was "
                    "not found in plugin registry' (FP32, INT32, INT64 and BOOL inputs)",
                    restrictions="imported as a NonZero plugin, which " + RTX_NO_PLUGINS + "; `trtconv build --trt rtx "
                    "--split-tail` builds the graph before it and writes the rest as an ONNX tail for ONNX Runtime"),
    "RoiAlign": dict(params="", source=RTX_MEASURED + ": one of RTX's two internal plugin creators",
                     restrictions="imported as RTX's internal ROIAlign_TRT plugin, whose constructor needs a GPU: "
                     "a CPU-only build fails (cudaError 35)"),
}


def _merge_params(text: str, changes: dict[str, str | None]) -> str:
    items = dict(p.split("=", 1) if "=" in p else (p, "") for p in filter(None, text.split(";")))
    for key, value in changes.items():
        if value is None:
            items.pop(key, None)
        else:
            items[key] = value
    return ";".join(f"{k}={v}" for k, v in items.items())


def _correct(row: Row, fixes: list[Correction]) -> Row:
    """Apply the corrections (trtconv/analyze/corrections.py); each one is named in the row's source."""
    for c in fixes:
        types = row.types if c.types is None else c.types
        if c.add_types:
            have = [t for t in types.split(",") if t]
            types = ",".join(have + [t for t in c.add_types.split(",") if t not in have])
        row = replace(row, types=types, params=_merge_params(row.params, c.params),
                      source=f"{row.source}; corrected ({c.source})")
    return row


def _rtx_plugin_rows() -> list[Row]:
    """Every plugin TensorRT 10.x/11.x knows is absent from TensorRT-RTX."""
    names = sorted(set(KEPT_IN_11) | set(REMOVED_IN_11) | set(NEW_IN_11))
    return [Row(name, "*", "removed-plugin", "", "", "", RTX_MEASURED, RTX_NO_PLUGINS) for name in names]


def build_table(source: Path, version: str) -> list[Row]:
    rows = _ops_rows(source, version)
    if not version.startswith("10."):
        rows = [replace(r, **OVERRIDES_11[r.op_type]) if r.op_type in OVERRIDES_11 else r for r in rows]  # type: ignore[arg-type]
        rows += DELTAS_11
    if version == "rtx":
        rows = [replace(r, **OVERRIDES_RTX[r.op_type]) if r.op_type in OVERRIDES_RTX else r for r in rows]  # type: ignore[arg-type]
    fixes = corrections_for(version)
    rows = [_correct(r, fixes[r.op_type]) if r.op_type in fixes else r for r in rows]
    if version == "rtx":
        rows += _rtx_plugin_rows()
    else:
        rows += _plugin_rows(version)
    return sorted(rows, key=lambda r: (r.status.endswith("plugin"), r.op_type))


def render(rows: list[Row]) -> str:
    lines = ["\t".join(COLUMNS)]
    lines += ["\t".join(c.replace("\t", " ") for c in r.cells()) for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 2:
        raise SystemExit("usage: python -m trtconv.analyze.maketables [OPERATORS.tsv [OUT_DIR]]")
    source = Path(args[0]) if args else DEFAULT_SOURCE
    out = Path(args[1]) if len(args) == 2 else DATA_DIR
    for version in VERSIONS:
        (out / f"trt-{version}.tsv").write_text(render(build_table(source, version)))


if __name__ == "__main__":
    main()
