"""``opdb models``: list the models stored and show one."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store

app = typer.Typer(help="List and show the models stored.", no_args_is_help=True)


@app.command("list")
def list_models(
    names: Annotated[
        bool,
        typer.Option(
            "--names",
            help="Print the names alone, one per line (for a shell loop: "
            "`for m in $(opdb models list --names); do ...; done`).",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """List every model with its operator counts, FLOPs and parameters."""
    from operator_db.db import queries

    with open_store(db) as store, store.transaction() as session:
        rows = queries.model_summaries(session)
    if names:
        for row in rows:
            typer.echo(row.name)
        return
    table = Table(
        "model", "mode", "batch", "configs", "op calls", "GFLOPs", "params (M)", "reference"
    )
    for row in rows:
        table.add_row(
            row.name,
            row.mode,
            str(row.batch_size or ""),
            str(row.configs),
            str(row.calls),
            f"{row.flops / 1e9:.3f}",
            f"{row.params / 1e6:.2f}",
            row.reference or "",
        )
    console.print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Model name.")],
    db: DatabaseOption = None,
) -> None:
    """Show a model's operator configurations, largest FLOPs first."""
    from operator_db.db import queries

    with open_store(db) as store, store.transaction() as session:
        ops = queries.model_operators(session, name)
    table = Table("op", "count", "inputs", "MFLOPs/call", "KiB/call", "key", title=name)
    for op in sorted(ops, key=lambda o: -(o.flops or 0) * o.count):
        shapes = " ".join("x".join(map(str, t["shape"])) for t in op.inputs)
        table.add_row(
            op.op,
            str(op.count),
            shapes,
            "" if op.flops is None else f"{op.flops / 1e6:.2f}",
            "" if op.bytes is None else f"{op.bytes / 1024:.1f}",
            op.key[:12],
        )
    console.print(table)
