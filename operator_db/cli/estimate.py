"""``opdb estimate``, ``opdb roofline``, ``opdb peaks``: what a model costs and what bounds it."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store
from operator_db.errors import NotFoundError

if TYPE_CHECKING:  # SQLAlchemy (and matplotlib for plots) behind these: imported by the commands
    from sqlalchemy.orm import Session


KindOption = Annotated[
    str | None,
    typer.Option("--device-kind", help="Device kind (default: the only one measured for MODEL)."),
]


def pick_kind(
    session: Session, model_name: str, kind: str | None, *, predicted: bool = False
) -> str:
    """Return ``kind``, or the only device kind with measurements of the model.

    ``predicted``: where none has, the only kind with a predictor.

    Raises:
        NotFoundError: none or several kinds qualify (the message lists them).
    """
    if kind is not None:
        return kind
    from operator_db.db import queries

    kinds = queries.kinds_measuring_model(session, queries.get_model(session, model_name).id)
    if not kinds and predicted:
        ids = {p.device_kind_id for p in queries.list_predictors(session)}
        kinds = {k.name for k in queries.device_kinds(session) if k.id in ids}
    if len(kinds) == 1:
        return kinds.pop()
    if not kinds:
        raise NotFoundError(
            f"{model_name} is not measured on any device kind yet: run "
            f"`opdb measure {model_name}` (or enqueue it for a worker)"
        )
    raise NotFoundError(
        f"{model_name} is measured on several kinds; choose with --device-kind: "
        + ", ".join(sorted(kinds))
    )


def estimate(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    device_kind: KindOption = None,
    timing: Annotated[
        str, typer.Option(help="eager, or graph (CUDA-graph time where measured).")
    ] = "eager",
    energy: Annotated[str, typer.Option(help="total, or dynamic (idle power removed).")] = "total",
    aggregate: Annotated[
        str,
        typer.Option(help="latest (newest result per configuration), or median of all stored."),
    ] = "latest",
    cache: Annotated[
        str,
        typer.Option(
            help="warm (inputs reused, the default measurement) or cold (caches flushed before "
            "every call: results of OPDB_MEASURE__CACHE_MODE=cold)."
        ),
    ] = "warm",
    context: Annotated[
        str,
        typer.Option(
            help="replay (a CPU model's operators as timed in a replay of its call order, where "
            "its run has one) or alone (looped alone)."
        ),
    ] = "replay",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the per-configuration CSV.")] = False,
    top: Annotated[int, typer.Option(help="Configurations listed in the table.")] = 15,
    predict: Annotated[
        bool,
        typer.Option(
            "--predict",
            help="Predict the configurations not measured on the kind (`opdb predict train`).",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Estimate MODEL's time and energy on a device kind from its measured operators."""
    if (
        timing not in ("eager", "graph")
        or energy not in ("total", "dynamic")
        or aggregate not in ("latest", "median")
        or cache not in ("warm", "cold")
        or context not in ("replay", "alone")
    ):
        raise typer.BadParameter(
            "--timing is eager or graph; --energy total or dynamic; --aggregate latest or "
            "median; --cache warm or cold; --context replay or alone"
        )
    from operator_db.config import get_settings
    from operator_db.db import queries
    from operator_db.estimate.compose import estimate_model
    from operator_db.estimate.options import EstimateOptions
    from operator_db.roofline.peaks import best_peaks, peaks_for_kind

    with open_store(db) as store, store.transaction(read_only=True) as session:
        kind = pick_kind(session, model, device_kind, predicted=predict)
        info = queries.get_model(session, model)
        peaks = best_peaks(peaks_for_kind(session, kind), info.dtype)
        predicted = None
        unmeasured = kind not in queries.kinds_measuring_model(session, info.id)
        if predict or unmeasured:  # scikit-learn behind it
            from operator_db.predict.mix import predicted_for

            predicted = predicted_for(session, model, kind, required=predict)
        est = estimate_model(
            session,
            model,
            kind,
            EstimateOptions(
                timing="graph" if timing == "graph" else "eager",
                energy="dynamic" if energy == "dynamic" else "total",
                peaks=peaks,
                aggregate="median" if aggregate == "median" else "latest",
                cache_mode="cold" if cache == "cold" else "warm",
                between_ops_warn=get_settings().estimate_between_ops_warn,
                predicted=predicted,
                context="alone" if context == "alone" else "replay",
            ),
        )
    if as_json:
        sys.stdout.write(json.dumps(est.as_dict(), indent=2, allow_nan=False) + "\n")
    elif as_csv:
        from operator_db.estimate.rows import CONFIG_COLUMNS

        writer = csv.DictWriter(sys.stdout, fieldnames=CONFIG_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(est.config_rows)
    else:
        from operator_db.cli.estimate_table import print_estimate

        print_estimate(est, top)


def roofline(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Model name; leave out to draw every configuration measured on --device-kind."
        ),
    ] = None,
    device_kind: KindOption = None,
    out: Annotated[Path, typer.Option("-o", "--out", help="PNG file to write.")] = Path(
        "roofline.png"
    ),
    chips: Annotated[
        str, typer.Option(help="Comma-separated chips of the peak table to overlay.")
    ] = "",
    as_csv: Annotated[bool, typer.Option("--csv", help="Also print the table as CSV.")] = False,
    db: DatabaseOption = None,
) -> None:
    """Plot MODEL (or a kind's configurations) on the device's roofline: roofs, points, counts."""
    if model is None:
        if device_kind is None:
            raise typer.BadParameter("name a MODEL, or a --device-kind to draw its configurations")
        if chips:
            raise typer.BadParameter("--chips overlays a model's plot only")
        _kind_roofline(device_kind, out, as_csv, db)
        return
    from operator_db.estimate.rooflines import model_roofline
    from operator_db.roofline.explain import count_classes
    from operator_db.roofline.model import without_work

    with open_store(db) as store, store.transaction(read_only=True) as session:
        kind = pick_kind(session, model, device_kind)
        view = model_roofline(session, model, kind)
    table = view.table
    path = view.plot(out, chips=[c.strip() for c in chips.split(",") if c.strip()])
    configs = table[table["op"] != "(model)"]
    bounds = configs["bound"].value_counts().to_dict()
    model_row = table[table["op"] == "(model)"].iloc[0]
    left_out = without_work(table)
    whole = (
        "the model not drawn: not every FLOPs/bytes known"
        if left_out
        else f"model at {model_row['intensity']:.1f} FLOP/byte, "
        f"{(model_row['efficiency'] or 0):.1%} of its roofline bound"
    )
    console.print(
        f"wrote {path}: {len(table) - 1} configurations "
        f"({bounds.get('memory', 0)} memory-bound, {bounds.get('compute', 0)} "
        f"compute-bound); {whole}"
    )
    if left_out:
        console.print(f"{left_out} configurations without FLOPs/bytes left out")
    counts = count_classes(configs["roof"], configs["efficiency"])  # efficiency: bound / time
    console.print(f"measured, by roof: {counts.describe(view.measured or view.spec)}")
    if as_csv:
        table.to_csv(sys.stdout, index=False)


def _kind_roofline(kind: str, out: Path, as_csv: bool, db: str | None) -> None:
    """``opdb roofline --device-kind KIND``: every configuration measured on the kind."""
    from operator_db.roofline.configs import kind_configs_roofline

    with open_store(db) as store, store.transaction(read_only=True) as session:
        view = kind_configs_roofline(session, kind)
    path = view.plot(out)
    roof = view.reference
    console.print(
        f"wrote {path}: {len(view.table)} configurations on {kind} ({view.dtype} roofs: "
        f"{roof.source if roof is not None else 'none'})"
    )
    if view.left_out:
        console.print(f"{view.left_out} configurations without FLOPs/bytes left out")
    console.print(f"by roof: {view.counts.describe(roof)}", soft_wrap=True)
    for cls in ("algorithm", "unexplained"):  # which algorithm, or why none explains a point
        for reason in view.reasons(cls):
            console.print(f"  {cls}: {reason.describe()}", soft_wrap=True)
    console.print(f"plain roof (no cache): {view.above_plain().describe()}")
    for line in view.attained_lines():
        console.print(line)
    if as_csv:
        view.table.to_csv(sys.stdout, index=False)


def chips(
    out: Annotated[Path, typer.Option("-o", "--out", help="Image to write (.png or .svg).")] = Path(
        "chips_roofline.png"
    ),
    dtype: Annotated[
        str, typer.Option(help="Dtype of the roofs (a chip without it: the nearest it has).")
    ] = "float32",
    device_kind: Annotated[
        list[str] | None,
        typer.Option(
            "--device-kind",
            help="Kind to draw over the chips (repeatable; default: every kind with measured "
            "peaks or imported from a data set).",
        ),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(help="Model to place as a point on each drawn kind (repeatable)."),
    ] = None,
    db: DatabaseOption = None,
) -> None:
    """Plot the roofline of every chip of the spec-sheet table, with this database's devices."""
    from operator_db.roofline.chip_plot import (
        chip_roofs,
        describe_roof,
        device_roofs,
        plot_chip_rooflines,
    )

    with open_store(db) as store, store.transaction(read_only=True) as session:
        devices = device_roofs(session, dtype, device_kind)
        points = []
        if model:  # each model's estimate and roofline table: pandas, only when asked for
            from operator_db.estimate.rooflines import model_points

            points = model_points(session, model, [d.kind_name for d in devices])
    path = plot_chip_rooflines(out, dtype=dtype, devices=devices, points=points)
    console.print(f"wrote {path}: {len(chip_roofs(dtype))} chips, {len(devices)} device kinds")
    for d in devices:
        console.print(f"{d.kind_name}: measured {describe_roof(d.measured)}")
        console.print(f"  spec ({d.spec_label}): {describe_roof(d.spec)}")
        for line in d.attained_lines():
            console.print(f"  {line}")
    for point in points:
        console.print(
            f"{point.label}: {point.intensity:.3g} FLOP/byte, {point.flops_per_s / 1e9:.4g} GFLOP/s"
        )


def peaks(
    device: Annotated[
        str | None, typer.Option("--device", help="auto, cpu, nvidia[:N] or fake.")
    ] = None,
    dtypes: Annotated[str, typer.Option(help="Comma-separated matmul dtypes.")] = (
        "float32,float16,bfloat16"
    ),
    list_table: Annotated[
        bool, typer.Option("--list", help="Print the shipped spec-sheet table and exit.")
    ] = False,
    missing: Annotated[
        bool,
        typer.Option(
            "--missing",
            help="Measure only where this device kind has no measured peaks of these dtypes and "
            "its memory yet; else show the stored ones.",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Measure this host's attainable peaks (large matmul per dtype, large copy) and store them.

    Each kernel is timed for ``OPDB_MEASURE__PEAK_MIN_TIME_S`` (0.5 s).
    """
    from operator_db.roofline.chips import load_peak_table

    if list_table:
        table = Table(
            "chip",
            "category",
            "float32 TFLOP/s",
            "float16 TFLOP/s",
            "bfloat16 TFLOP/s",
            "bandwidth GB/s",
            "source",
        )
        for chip in load_peak_table():
            f = {str(k): v for k, v in chip.peak_flops_per_s.items()}

            def tf(name: str, f: dict[str, float] = f) -> str:
                return f"{f[name] / 1e12:.1f}" if name in f else "-"

            table.add_row(
                chip.name,
                chip.category,
                tf("float32"),
                tf("float16"),
                tf("bfloat16"),
                f"{chip.memory_bandwidth_bytes_per_s / 1e9:.0f}",
                chip.source,
            )
        console.print(table)
        return
    from operator_db.config import get_settings
    from operator_db.devices.factory import open_device
    from operator_db.roofline.peaks import peaks_for_kind
    from operator_db.study.run import ensure_peaks

    wanted = [d.strip() for d in dtypes.split(",") if d.strip()]
    settings = get_settings()
    with open_store(db) as store, open_device(device, settings=settings) as dev:
        min_time_s = settings.measure.peak_min_time_s
        measured = ensure_peaks(store, dev, min_time_s, wanted, again=not missing)
        kind = dev.identity().name
        with store.transaction(read_only=True) as session:
            kind_peaks = peaks_for_kind(session, kind)
    if measured is None:
        console.print(f"{kind}: measured before; `opdb peaks` without --missing measures again")
    scaled = kind_peaks.spec_scale != 1.0
    table = Table(
        "quantity",
        "dtype",
        "spec" + (" (scaled)" if scaled else ""),
        *(["spec (whole chip)"] if scaled else []),
        "measured",
        "measured / spec",
        title=kind
        + (f"\nspec: {kind_peaks.spec_label}" if kind_peaks.spec_origin else "\nno spec sheet"),
    )
    for row in kind_peaks.rows():
        unit, scale = ("GB/s", 1e9) if row["quantity"] == "bytes_per_s" else ("TFLOP/s", 1e12)

        def fmt(v: float | None, unit: str = unit, scale: float = scale) -> str:
            return "-" if v is None else f"{v / scale:.3g} {unit}"

        frac = row.get("fraction_of_spec")
        table.add_row(
            row["quantity"],
            row["dtype"] or _level(row),
            fmt(row.get("spec")),
            *([fmt(row.get("spec_chip"))] if scaled else []),
            fmt(row.get("measured")),
            "-" if frac is None else f"{frac:.0%}",
        )
    console.print(table)
    if measured is None:
        return
    allotment = measured.provenance.get("cpu_allotment")
    if isinstance(allotment, dict):
        console.print(
            f"this process may use {allotment.get('usable_cores'):g} cores (limited by "
            f"{allotment.get('limited_by')}); stored with the host, so the spec roof is scaled "
            "to it wherever the database is read"
        )
    for dtype, reason in measured.skipped.items():
        console.print(f"skipped {dtype}: {reason}")


def _level(row: dict[str, object]) -> str:
    """Return a cache level's name and capacity (``L2, 2 MiB``), or "" for memory."""
    capacity = row.get("capacity_bytes")
    if not row.get("level") or not isinstance(capacity, int | float):
        return ""
    return f"{row['level']}, {capacity / (1 << 20):g} MiB"
