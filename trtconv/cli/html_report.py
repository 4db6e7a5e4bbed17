"""``--report FILE.html`` on check, rewrite, quantize and build: the commands record their JSON
documents (:func:`record`), and the page is written when the command ends, passed or failed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from trtconv.api import layer_rows, manifest_path, off_precision, read_manifest, report_html
from trtconv.errors import DataError, ExitCode, TrtconvError
from trtconv.outputs import check_not_the_model, check_output_path, write_text

F = TypeVar("F", bound=Callable[..., Any])
KEY = "trtconv.report"


def record(kind: str, doc: Any) -> None:
    """Keep a command's document for its report (a no-op without --report)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(KEY, {})[kind] = doc


def _layers(manifest: dict[str, Any]) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]] | None:
    table = manifest.get("layers") or {}
    if not table.get("layers"):
        return None
    source = str(table.get("source") or "engine")
    rows = layer_rows(table["layers"])
    note = "engine inspector" if source == "engine" else "strongly typed network, recorded at build time"
    return rows, note, off_precision(rows, manifest.get("precision") or {}, source)


def _engine_manifest(params: dict[str, Any]) -> dict[str, Any] | None:
    output = params.get("output")
    if output is None or not str(output).endswith(".engine") and not manifest_path(Path(output)).is_file():
        return None
    try:
        return read_manifest(manifest_path(Path(output)))
    except (FileNotFoundError, DataError, OSError):
        return None


def _restored(manifest: dict[str, Any] | None) -> str:
    """A build restored from the cache: what its manifest says of the engine's verification."""
    verify = (manifest or {}).get("verify")
    if not isinstance(verify, dict):
        return "restored from the cache; the engine was not run when it was built (verify skipped)"
    if verify.get("passed"):
        return "restored from the cache; the engine was run and verified against ONNX Runtime when it was built"
    return f"restored from the cache; the engine was not run when it was built: {verify.get('reason') or 'verify skipped'}"


def _unchecked(gate: dict[str, Any]) -> str:
    """Why a quantize's gate did not judge: the words of its text report's gate line."""
    if gate.get("unverified") and gate.get("verdict"):
        return str(gate["verdict"])
    check = gate.get("accuracy_check") or "not checked"
    return "not checked (no sample data)" if check == "not checked" else f"not checked (judged on {check})"


def write_report(path: Path, command: str, params: dict[str, Any], docs: dict[str, Any], status: str) -> None:
    docs = dict(docs)
    if command == "build" and docs.get("manifest") is None:
        docs["manifest"] = _engine_manifest(params)  # a cache hit: the restored engine's manifest
        if status == "passed":
            status = f"succeeded (exit 0): {_restored(docs['manifest'])}"
    layers = _layers(docs["manifest"]) if docs.get("manifest") else None
    text = report_html(command, str(params.get("model", "")), docs, status=status, layers=layers)
    write_text(path, text, force=True)


def report_option(f: F) -> F:
    """Add ``--report FILE.html``; place it above ``cache_option`` so a cache hit gets a report too."""

    @functools.wraps(f)
    def wrapper(*args: Any, report: Path | None = None, **kwargs: Any) -> Any:
        if report is None:
            return f(*args, **kwargs)
        check_output_path(report, force=True, flag="--report")  # before any work: nothing written if not
        ctx = click.get_current_context()
        check_not_the_model(report, ctx.params.get("model"), "--report", ".html")
        status = "passed"
        try:
            return f(*args, **kwargs)
        except click.exceptions.Exit as exc:
            status = "passed" if exc.exit_code == 0 else "" if exc.exit_code == ExitCode.INTERRUPTED else \
                f"exit {exc.exit_code}"
            raise
        except TrtconvError as exc:
            status = f"failed (exit {int(exc.exit_code)}): {exc.message}"
            raise
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop, and leave nothing behind (exit 130), no page either
            status = ""
            raise
        except Exception as exc:  # a bug (exit 1): the page says so, never "passed"
            status = f"failed (exit 1): internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            if status:
                _write_at_end(report, ctx, status)

    return click.option("--report", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE.html",
                        help="Also write a self-contained HTML report (no network fetches; a CI artifact).")(
        wrapper)  # type: ignore[return-value]


def _write_at_end(report: Path, ctx: click.Context, status: str) -> None:
    """The page for the command that just ended with ``status`` (``passed``, ``exit N``, ``failed ...``)."""
    docs = ctx.meta.get(KEY, {})
    checked = docs.get("verification")
    if status == "passed" and checked is not None:  # a build says what it verified, never "passed" alone
        status = f"succeeded (exit 0): {checked['summary']}"
    gate = docs.get("gate")
    if status == "passed" and gate is not None and not gate.get("checked"):  # written, the gate not run
        status = f"succeeded (exit 0): written; accuracy gate {_unchecked(gate)}"
    if not docs and ctx.command.name != "build" and status == "passed":
        status = "passed (result restored from the cache: the stored run's details are not kept)"
    write_report(report, ctx.command.name or "", dict(ctx.params), docs, status)
    click.echo(f"trtconv: report written to {report}", err=True)
