"""``opdb report``: the studies of the models measured, as one report with plots and tables."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from operator_db.cli.common import DatabaseOption, console, open_store


class ReportFormatChoice(StrEnum):
    """Output formats of ``opdb report``."""

    md = "md"
    html = "html"


def report(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the report, its plots and CSV tables.")
    ] = Path("report"),
    fmt: Annotated[
        ReportFormatChoice, typer.Option("--format", help="Markdown (md) or HTML.")
    ] = ReportFormatChoice.md,
    device_kind: Annotated[
        list[str] | None,
        typer.Option("--device-kind", help="Study only this device kind (repeatable)."),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="Report only this model (repeatable; default: all)."),
    ] = None,
    db: DatabaseOption = None,
) -> None:
    """Write the study report: runs, complexity, batch, correlation, roofline, backward, layers."""
    from operator_db.report import build_report

    with open_store(db) as store, store.transaction(read_only=True) as session:
        path = build_report(
            session,
            out,
            fmt="html" if fmt is ReportFormatChoice.html else "md",
            device_kinds=device_kind or None,
            models=model or None,
            source=store.display_url,
        )
    console.print(f"wrote {path}")
