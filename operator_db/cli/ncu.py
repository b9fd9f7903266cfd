"""``opdb ncu command|probe|import``: Nsight Compute counters of a model's configurations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from operator_db.cli.common import DatabaseOption, DeviceOption, console, err_console, open_store

app = typer.Typer(
    help="Hardware counters from Nsight Compute: the command, the profiled run, the import.",
    no_args_is_help=True,
)

KindOption = Annotated[
    str | None,
    typer.Option(
        "--device-kind",
        help="Device kind, where the CSV has no device name "
        "(its device__attribute_display_name column).",
    ),
]


@app.command()
def command(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    output: Annotated[
        str | None, typer.Option("-o", "--output", help="CSV to write (default: ncu-MODEL.csv).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="The GPU to profile on.")] = "nvidia",
    device_kind: Annotated[
        str | None,
        typer.Option("--device-kind", help="Named in the import command printed after it."),
    ] = None,
    ncu: Annotated[str, typer.Option("--ncu", help="The ncu executable.")] = "ncu",
    db: DatabaseOption = None,
) -> None:
    """Print the ncu command line that profiles each configuration of MODEL once into a CSV.

    Run it on a host with the GPU and ncu, then `opdb ncu import` the CSV (docs/ncu.md).
    """
    from operator_db.db import queries
    from operator_db.roofline.ncu import ncu_command, shell_line

    with open_store(db) as store, store.transaction(read_only=True) as session:
        found = queries.get_model(session, model)
        configs = queries.model_configs(session, found.id, measurable_only=True)
    csv_path = output or f"ncu-{model}.csv"
    # Plain output, never wrapped: the line is meant to be run as it is.
    typer.echo(shell_line(ncu_command(model, output=csv_path, device=device, db=db, ncu=ncu)))
    then = ["opdb", "ncu", "import", csv_path]
    if device_kind is not None:
        then += ["--device-kind", device_kind]
    err_console.print(
        f"# profiles one call of each of the {len(configs)} measurable configurations of {model}; "
        f"then: {shell_line(then)}",
        markup=False,
    )


@app.command()
def probe(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    device: DeviceOption = None,
    db: DatabaseOption = None,
) -> None:
    """Call each configuration of MODEL once inside its NVTX range (what ncu profiles).

    Nothing is timed or stored. Run it under the command `opdb ncu command` prints.
    """
    from operator_db.config import get_settings
    from operator_db.devices.factory import open_device
    from operator_db.worker.probe import probe_model

    settings = get_settings()
    with open_store(db) as store, open_device(device, settings=settings) as dev:
        result = probe_model(store, model, dev, settings.measure)
    console.print(
        f"{model}: {result.probed} configurations called once in their NVTX range on "
        f"{dev.identity().name}"
        + (f"; {len(result.failed)} could not be built or run" if result.failed else ""),
        markup=False,
        soft_wrap=True,
    )
    for key, why in result.failed.items():
        err_console.print(f"{key[:12]}: {why}", markup=False)


@app.command("import")
def import_csv(
    path: Annotated[Path, typer.Argument(help="ncu --csv --page raw output.", dir_okay=False)],
    device_kind: KindOption = None,
    db: DatabaseOption = None,
) -> None:
    """Store the counters of each configuration profiled in an ncu raw CSV (latest wins)."""
    from operator_db.roofline.ncu import import_counters, read_csv_text

    text = read_csv_text(path)
    with open_store(db) as store, store.transaction() as session:
        summary = import_counters(session, text, path.name, device_kind=device_kind)
    console.print(summary.line(), markup=False, soft_wrap=True)
