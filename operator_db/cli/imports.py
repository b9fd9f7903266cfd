"""``opdb import``: a public measurement data set's results into the database, with their source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store

if TYPE_CHECKING:
    from operator_db.datasets.importer import ImportReport

BAD_ROWS_PRINTED = 20


def report_table(report: ImportReport) -> Table:
    """Return the per-file counts of an import, with totals."""
    table = Table("file", "read", "imported", "duplicate", "skipped", title=f"{report.source}")
    for counts in [*report.files, None]:
        if counts is None:
            table.add_section()
            counts = report.total()
        table.add_row(
            counts.file,
            str(counts.read),
            str(counts.imported),
            str(counts.duplicate),
            str(counts.skipped),
        )
    return table


def import_(
    path: Annotated[
        Path, typer.Argument(help="The data set's folder, or one file of it.", show_default=False)
    ],
    refuse_bad: Annotated[
        bool,
        typer.Option(
            "--refuse-bad",
            help="Refuse the whole import if a row is bad (default: skip and count bad rows).",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Import a measurement data set (NeuSight) as results of its GPUs, in one transaction.

    Each row becomes a result of operator-db's own configuration for the same call, on the
    device kind of its GPU, marked with the data set as its source. A second run adds nothing.
    Bad rows are reported with their file and line, and skipped (or, with --refuse-bad, the
    import is refused and nothing is written).
    """
    from operator_db.datasets.importer import import_data_set
    from operator_db.datasets.neusight.reader import neusight

    data, chosen = neusight(path)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    task = progress.add_task(f"import {data.source.name}", total=len(chosen))

    def advance(file: str, rows: int) -> None:
        progress.update(task, advance=1, description=f"{Path(file).name} ({rows} rows)")

    with progress, open_store(db) as store, store.transaction() as session:
        report = import_data_set(
            session,
            data,
            on_bad="refuse" if refuse_bad else "skip",
            files=chosen,
            progress=advance,
        )
    console.print(report_table(report))
    for bad in report.bad[:BAD_ROWS_PRINTED]:
        console.print(f"skipped {bad}", markup=False)
    if len(report.bad) > BAD_ROWS_PRINTED:
        console.print(f"... and {len(report.bad) - BAD_ROWS_PRINTED} more bad rows", markup=False)
    total = report.total()
    console.print(
        f"{data.source.name}: {total.imported} results imported, {total.duplicate} duplicates, "
        f"{total.skipped} bad rows skipped, {report.new_configs} new configurations; "
        f"device kinds: {', '.join(report.kinds)}",
        markup=False,
    )
