"""``opdb sweep``: a grid of configurations of one operator type, written as a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from operator_db.cli.common import console


def sweep(
    op: Annotated[
        str | None,
        typer.Argument(help="Operator type: conv2d, linear, matmul, attention, layer_norm, gelu."),
    ] = None,
    values: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[DIM=V1,V2]...", help="Values of a dimension instead of the defaults."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The spec file (default: sweep-OP.yaml)."),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Model name in the spec (default: sweep-OP).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many points.")] = 1000,
    list_sweeps: Annotated[
        bool, typer.Option("--list", help="List the operator types and their default grids.")
    ] = False,
) -> None:
    """Write a spec of OP's configurations over a grid, to ingest and measure like any model.

    `opdb ingest` the file, then `opdb enqueue sweep-OP --device-kind KIND --no-model-run` (a
    sweep has no whole model) or `opdb measure sweep-OP --no-model-run` on this machine.
    """
    from operator_db.ops.sweeps import SWEEPS, get_sweep, parse_values, points, sweep_spec
    from operator_db.specs.io import write_spec

    if list_sweeps or op is None:
        table = Table("sweep", "configurations", "grid", "what", title="sweeps")
        for s in SWEEPS.values():
            grid = ", ".join(f"{k}={','.join(map(str, v))}" for k, v in s.grid.items())
            table.add_row(s.name, str(sum(1 for _ in points(s))), grid, s.description)
        console.print(table)
        if op is None and not list_sweeps:
            raise typer.BadParameter("name an operator type (see the list above)")
        return
    chosen = get_sweep(op)
    spec = sweep_spec(chosen, parse_values(values or []), name=name, limit=limit)
    path = output or Path(f"{spec.model.name}.yaml")
    write_spec(spec, path)
    flops = sum(o.flops or 0 for o in spec.operators)
    console.print(
        f"{spec.model.name}: {len(spec.operators)} configurations of {chosen.name}, "
        f"{flops / 1e9:.3g} GFLOPs in all → {path}"
    )
