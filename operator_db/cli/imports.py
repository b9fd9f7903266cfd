"""``opdb import``: a public measurement data set's results into the database, with their source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store, progress_bar

if TYPE_CHECKING:
    from rich.progress import Progress

    from operator_db.datasets.importer import ImportReport
    from operator_db.datasets.neusight.runs import RunsReport
    from operator_db.datasets.records import OnBad

BAD_ROWS_PRINTED = 20


def report_table(report: ImportReport | RunsReport, *, title: str | None = None) -> Table:
    """Return the per-file counts of an import, with totals."""
    table = Table("file", "read", "imported", "duplicate", "skipped", title=title or report.source)
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
    """Import a measurement data set (NeuSight, Vidur) as results of its GPUs, in one transaction.

    Each row becomes a result of operator-db's own configuration for the same call, on the
    device kind of its GPU, marked with the data set as its source. A second run adds nothing.
    Bad rows are reported with their file and line, and skipped (or, with --refuse-bad, the
    import is refused and nothing is written).
    """
    from operator_db.datasets.importer import ImportReport, import_data_set
    from operator_db.datasets.neusight.compose import composition_table, composition_text
    from operator_db.datasets.neusight.reader import neusight
    from operator_db.datasets.neusight.runs import import_runs
    from operator_db.datasets.vidur.reader import in_vidur
    from operator_db.estimate.compose import estimate_model
    from operator_db.estimate.options import EstimateOptions

    on_bad: OnBad = "refuse" if refuse_bad else "skip"
    if in_vidur(path):
        _import_vidur(path, on_bad, db)
        return
    data, files, labels = neusight(path)
    progress, advance = _progress(data.source.name, len(files) + len(labels))
    with progress, open_store(db) as store, store.transaction() as session:
        report = ImportReport(data.source.name)
        if files:
            report = import_data_set(session, data, on_bad=on_bad, files=files, progress=advance)
        runs = import_runs(session, data, files=labels, on_bad=on_bad, progress=advance)
        composed = composition_table(
            session,
            runs.runs,
            lambda s, model, kind: estimate_model(
                s, model, kind, EstimateOptions(aggregate="median", peaks="best")
            ),
        )
    if files:
        console.print(report_table(report))
    if labels:
        console.print(report_table(runs, title=f"{data.source.name}: whole-model runs"))
    bad = [*report.bad, *runs.bad]
    for row in bad[:BAD_ROWS_PRINTED]:
        console.print(f"skipped {row}", markup=False)
    if len(bad) > BAD_ROWS_PRINTED:
        console.print(f"... and {len(bad) - BAD_ROWS_PRINTED} more bad rows", markup=False)
    for row in runs.left_out:
        console.print(f"left out {row}", markup=False)
    total, labelled, traced = report.total(), runs.total("label"), runs.total("trace")
    console.print(
        f"{data.source.name}: {total.imported} results imported, {total.duplicate} duplicates, "
        f"{total.skipped} bad rows skipped, {report.new_configs} new configurations; "
        f"{labelled.imported} whole-model runs imported ({labelled.duplicate} already stored, "
        f"{len(runs.left_out)} labels left out), {traced.imported} results of their traces' "
        f"nodes ({traced.duplicate} already stored); device kinds: {', '.join(report.kinds)}",
        markup=False,
    )
    if composed:
        console.print("\nEach run's estimate (Σ count × per-call time of imported figures):")
        console.print(composition_text(composed), markup=False)


def _progress(name: str, total: int) -> tuple[Progress, Callable[[str, int], None]]:
    """Return a progress bar of an import's files, and its advance(file, rows) callback."""
    progress = progress_bar(disable=not console.is_terminal)
    task = progress.add_task(f"import {name}", total=total)

    def advance(file: str, rows: int) -> None:
        progress.update(task, advance=1, description=f"{Path(file).name} ({rows} rows)")

    return progress, advance


def _import_vidur(path: Path, on_bad: OnBad, db: str | None) -> None:
    """Import Vidur's fp16 operator profiles (``datasets.vidur``)."""
    from operator_db.datasets.importer import import_data_set
    from operator_db.datasets.vidur.reader import vidur

    data, files = vidur(path)
    progress, advance = _progress(data.source.name, len(files))
    with progress, open_store(db) as store, store.transaction() as session:
        report = import_data_set(session, data, on_bad=on_bad, files=files, progress=advance)
    console.print(report_table(report))
    for row in report.bad[:BAD_ROWS_PRINTED]:
        console.print(f"skipped {row}", markup=False)
    if len(report.bad) > BAD_ROWS_PRINTED:
        console.print(f"... and {len(report.bad) - BAD_ROWS_PRINTED} more bad rows", markup=False)
    for why, count in sorted(data.left_out.items()):
        console.print(f"not imported: {count} results of {why}", markup=False)
    total = report.total()
    console.print(
        f"{data.source.name}: {total.imported} results imported, {total.duplicate} duplicates, "
        f"{total.skipped} bad rows skipped, {report.new_configs} new configurations (float16); "
        f"device kinds: {', '.join(report.kinds)}",
        markup=False,
    )
