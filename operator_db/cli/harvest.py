"""``opdb harvest``: a model reference → one YAML spec per batch size."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from operator_db.cli.common import console
from operator_db.errors import HarvestError

if TYPE_CHECKING:
    from operator_db.harvest import HarvestResult


class RunMode(StrEnum):
    """What one step of the model is: a forward pass, or a forward and a backward pass."""

    inference = "inference"
    training = "training"


class RunDevice(StrEnum):
    """Where the model runs while it is harvested."""

    auto = "auto"
    meta = "meta"
    cpu = "cpu"


INPUT_HELP = (
    "An input as [NAME=]1x3x224x224[:DTYPE][:LOW..HIGH], e.g. 1x3x224x224 or "
    "input_ids=1x128:int64:0..30522. Repeat for several inputs: unnamed ones are passed "
    "positionally, named ones by keyword. Default: the model's usual input (transformers, "
    "torchvision, timm)."
)


def output_path(output: Path, name: str, batch_sizes: int) -> Path:
    """Return where the spec of model ``name`` goes: ``output`` (.yaml) or ``output/name.yaml``.

    A file name may hold ``{batch}`` (replaced by the batch size, through ``name``'s suffix).

    Raises:
        HarvestError: one file name for several batch sizes without ``{batch}``.
    """
    if output.suffix in (".yaml", ".yml"):
        if "{batch}" in output.name:
            return output.with_name(output.name.replace("{batch}", name.rsplit("-b", 1)[-1]))
        if batch_sizes > 1:
            raise HarvestError(
                f"-o {output} names one file for {batch_sizes} batch sizes; give a directory "
                "or put {batch} in the file name"
            )
        return output
    return output / f"{name}.yaml"


def summary_table(rows: list[tuple[Path, HarvestResult]]) -> Table:
    """Return a table of the specs written: configurations, calls, GFLOPs, opaque modules."""
    training = any(r.spec.model.mode == "training" for _, r in rows)
    columns = ["spec", "model", "device", "configs", "calls", "GFLOPs"]
    columns += ["GFLOPs bwd"] if training else []
    table = Table(*columns, "opaque", "seconds", title="harvested")
    for path, r in rows:
        cells = [
            str(path),
            r.spec.model.name,
            r.device,
            str(r.configurations),
            str(r.calls),
            f"{r.flops / 1e9:.3f}",
        ]
        cells += [f"{r.flops_backward / 1e9:.3f}"] if training else []
        table.add_row(*cells, str(sum(o.count for o in r.opaque)), f"{r.seconds:.2f}")
    return table


def harvest(
    model_ref: Annotated[
        str,
        typer.Argument(
            metavar="MODEL_REF",
            help="torchvision:NAME, timm:NAME, transformers:CLASS (default config, never "
            "downloads) or module:pkg.mod:factory; overrides may follow '?' (k=v&k=v).",
        ),
    ],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE]...",
            help="Config or factory overrides, e.g. num_hidden_layers=6 (values read as JSON).",
        ),
    ] = None,
    inputs: Annotated[list[str] | None, typer.Option("--input", "-i", help=INPUT_HELP)] = None,
    batch_size: Annotated[
        str | None,
        typer.Option(
            "--batch-size",
            "-b",
            help="Comma-separated batch sizes (first dimension of every input); one spec each.",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Floating-point dtype of the weights and float inputs (default: the "
            "model's), e.g. bfloat16.",
        ),
    ] = None,
    mode: Annotated[
        RunMode,
        typer.Option(
            "--mode", help="inference: forward FLOPs; training: forward and backward FLOPs."
        ),
    ] = RunMode.inference,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="A directory (specs named NAME-bN.yaml) or a .yaml file "
            "({batch} in its name for several batch sizes).",
        ),
    ] = Path("."),
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Model name in the spec, before the -bN suffix (default: from the reference).",
        ),
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", help="A sentence on the model, kept in the spec.")
    ] = None,
    device: Annotated[
        RunDevice,
        typer.Option(
            "--device",
            help="auto: meta, or the CPU if an op needs data; meta: never the CPU; "
            "cpu: always (real weights in memory).",
        ),
    ] = RunDevice.auto,
    opaque_custom: Annotated[
        bool,
        typer.Option(
            "--opaque-custom-leaves",
            help="Record each custom leaf module with parameters (not a torch.nn class, e.g. "
            "transformers' Conv1D) as one opaque call, never measured, instead of tracing the "
            "functional calls inside it (the default).",
        ),
    ] = False,
    _trace_custom: Annotated[
        bool,
        typer.Option(
            "--trace-custom-leaves", hidden=True, help="The default now; accepted, does nothing."
        ),
    ] = False,
) -> None:
    """Harvest a model into YAML specs, one per batch size.

    Each spec lists the model's distinct operator configurations with their counts, FLOPs (never
    MACs) and compulsory bytes. The model runs on the meta device: no weights in memory, nothing
    downloaded.
    """
    # Imported here: torch takes a second to import, and other opdb commands do not need it.
    from operator_db.harvest import (
        harvest_model,
        load_reference,
        parse_batch_sizes,
        parse_input,
        parse_overrides,
        parse_reference,
        with_batch,
    )
    from operator_db.harvest.inputs import parse_dtype
    from operator_db.harvest.refs import default_inputs
    from operator_db.harvest.result import where

    ref = parse_reference(model_ref, parse_overrides(overrides))
    sizes = parse_batch_sizes(batch_size)
    floating = parse_dtype(dtype)
    given = [parse_input(text) for text in inputs or []]
    module = load_reference(ref)
    base = given or default_inputs(ref, module)
    if not base:
        raise HarvestError(f"{ref.text}: no default inputs known; give --input (e.g. 1x3x224x224)")
    rows: list[tuple[Path, HarvestResult]] = []
    for size in [*sizes] if sizes else [None]:
        batch_inputs = with_batch(base, size) if size is not None else list(base)
        batch = batch_inputs[0].shape[0] if batch_inputs[0].shape else None
        stem = name or ref.default_name
        result = harvest_model(
            module,
            batch_inputs,
            reference=ref,
            mode=mode.value,
            dtype=floating,
            device=device.value,
            name=f"{stem}-b{batch}" if batch else stem,
            custom_leaves="opaque" if opaque_custom else "trace",
            description=description,
        )
        path = output_path(output, result.spec.model.name, len(sizes) if sizes else 1)
        result.write(path)
        rows.append((path, result))
    console.print(summary_table(rows))
    for _, r in rows[:1]:  # what follows is the same for every batch size
        if r.fallback:
            console.print(f"ran on the CPU: {r.fallback}", markup=False)
        for t in r.traced:
            console.print(
                f"traced ({t.count}x, recorded as its calls): {t.op} at {where(t.locations)}",
                markup=False,
            )
        for o in r.opaque:
            console.print(
                f"opaque ({o.count}x, never measured): {o.op} at {where(o.locations)}: {o.reason}",
                markup=False,
            )
        for k in r.skipped:
            console.print(
                f"skipped ({k.count}x, not in the spec): {k.op} at {where(k.locations)}: "
                f"{k.reason}",
                markup=False,
            )
        for warning in r.warnings:
            console.print(f"note: {warning}", markup=False)
