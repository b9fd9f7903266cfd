"""``opdb doctor``: check this host before it measures; a table (or JSON) and an exit code."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from operator_db.cli.common import DatabaseOption, DeviceOption, console

if TYPE_CHECKING:
    from operator_db.doctor import DoctorReport

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def render(report: DoctorReport) -> None:
    """Print the report as a table and a one-line verdict."""
    table = Table("check", "status", "value", "what to do", show_lines=False)
    for check in report.checks:
        table.add_row(
            check.title,
            Text(check.status, style=_STYLE[check.status]),
            check.value,
            check.action,
        )
    console.print(table)
    counts = report.counts()
    verdict = (
        "measuring here would give wrong numbers (see the fail rows)"
        if report.exit_code
        else "measuring here is right" + (" (see the warnings)" if counts["warn"] else "")
    )
    console.print(
        f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail in "
        f"{report.elapsed_s:.1f} s: {verdict}"
    )


def doctor(
    device: DeviceOption = None,
    db: DatabaseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    window: Annotated[
        float,
        typer.Option(min=0.0, help="Length of the idle window and of the load window, in seconds."),
    ] = 2.0,
    load: Annotated[
        bool, typer.Option("--load/--no-load", help="Run the load window (a small matmul).")
    ] = True,
) -> None:
    """Check this host before it measures: device, energy sources, torch, settings, database.

    Exit code 1 when a check fails: measuring here would give wrong numbers, or could not start.
    Warnings leave it at 0; docs/doctor.md says which check fails and which warns.
    """
    from operator_db.config import get_settings
    from operator_db.doctor import DoctorOptions, run_doctor

    settings = get_settings()
    report = run_doctor(
        settings, device=device, db_url=db, options=DoctorOptions(window_s=window, load=load)
    )
    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    else:
        render(report)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
