"""``--report FILE.html``: one self-contained page (inline CSS and SVG, no script, no fetch) with what a
command found and did, readable from a CI artifact."""

from trtconv.htmlreport.document import report_html

__all__ = ["report_html"]
