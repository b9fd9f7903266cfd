"""``opdb ingest``: validate spec files and store them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from operator_db.cli.common import DatabaseOption, console, open_store

if TYPE_CHECKING:
    from operator_db.db.ingest import IngestResult
    from operator_db.specs import LoadedSpec


def summary_table(results: list[IngestResult]) -> Table:
    """Return a table of what each spec did, with totals."""
    table = Table(
        "spec", "model", "status", "operators", "new configs", "known configs", title="ingested"
    )
    for r in results:
        table.add_row(
            Path(r.source).name,
            r.model,
            r.status,
            str(r.operators),
            str(r.new_configs),
            str(r.known_configs),
        )
    table.add_section()
    table.add_row(
        f"{len(results)} specs",
        f"{len({r.model for r in results})} models",
        "",
        str(sum(r.operators for r in results)),
        str(sum(r.new_configs for r in results)),
        str(sum(r.known_configs for r in results)),
    )
    return table


def admitted_specs(paths: Sequence[str | Path]) -> list[LoadedSpec]:
    """Load and validate spec files whole, and check them at the door (``ops.admission``).

    Raises:
        SpecError: the first file that is not valid, or asks what a worker may not run.
    """
    from operator_db.config import get_settings
    from operator_db.ops.admission import load_admitted  # torch: the ops a worker may build

    settings = get_settings()
    return load_admitted(
        paths,
        max_spec_bytes=settings.max_spec_bytes,
        max_tensor_numel=settings.max_tensor_numel,
        max_tensor_bytes=settings.max_tensor_bytes,
        max_call_flops=settings.max_call_flops,
        recompute=True,
    )


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Spec files, directories or globs.")],
    db: DatabaseOption = None,
    mark: Annotated[
        bool, typer.Option("--mark-processed", help="Set 'processed: true' in each file stored.")
    ] = False,
) -> None:
    """Validate every spec whole, then store them all in one transaction.

    Nothing is written unless every file is valid. Re-ingesting a spec changes nothing; a spec whose
    content changed replaces its model's operator list.
    """
    from operator_db.db.ingest import ingest_specs
    from operator_db.specs.io import mark_processed

    specs = admitted_specs(paths)
    with open_store(db) as store, store.transaction() as session:
        results = ingest_specs(session, specs)
    for r in results:
        if r.status == "replaced":
            console.print(f"{r.source}: content changed, replaced the operator list of {r.model}")
        for line in r.warnings():
            console.print(Text(f"warning: {line}", style="bold yellow"), soft_wrap=True)
    console.print(summary_table(results))
    if mark:
        for loaded in specs:
            mark_processed(Path(loaded.source))
