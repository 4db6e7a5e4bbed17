"""The pieces the CLI's reports are made of: the HTML page, precision rule lines, output
statistics, progress phases, operator names, sample limits.

Thin re-exports, so the CLI imports only trtconv.api.
"""

from __future__ import annotations

from trtconv.htmlreport import report_html
from trtconv.onnxutil import qualified_op
from trtconv.precision import LONG_PHASES, PHASES, parts_line, rule_summaries
from trtconv.reference import OutputStats, parse_limit

__all__ = [
    "report_html",  # the --report page from the commands' JSON documents
    "qualified_op",  # "domain::OpType", as check lists unsupported operators
    "LONG_PHASES", "PHASES",  # quantize's progress phases (and those that get a heartbeat)
    "rule_summaries",  # the FP16 keep-in-FP32 rules, one line each
    "OutputStats",  # per-output statistics of the reference, in the precision report
    "parse_limit",  # --max-samples' value ("all" or a count)
    "parts_line",  # INT8's samples per part in words (the HTML page says the same)
]
