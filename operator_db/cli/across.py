"""``opdb predict across train|evaluate|calibrate`` and ``opdb compare``: GPUs never measured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, err_console, open_store

if TYPE_CHECKING:  # a command's imports wait for the command (the CLI starts at once)
    import pandas as pd

    from operator_db.predict.across.evaluate import Run
    from operator_db.predict.devices import GpuFacts

app = typer.Typer(
    help="The cross-device model: a GPU predicted from other GPUs' results and its spec sheet.",
    no_args_is_help=True,
)

CapOption = Annotated[
    int, typer.Option(min=0, help="Results per GPU and family fitted on at most (0: all).")
]
LevelOption = Annotated[
    float, typer.Option(min=0.5, max=0.99, help="Nominal coverage of the prediction intervals.")
]
DEFAULT_HELD_OUT = ("NVIDIA L4", "NVIDIA A100 80GB PCIe")
"""NeuSight's two test GPUs."""


@app.command()
def train(level: LevelOption = 0.9, cap: CapOption = 3000, db: DatabaseOption = None) -> None:
    """Fit the cross-device model on every GPU kind's results (measured and imported)."""
    from operator_db.predict.across.store import train as train_across

    with open_store(db) as store, store.transaction() as session:
        across, row = train_across(session, level=level, cap=cap, progress=err_console.print)
    table = Table(
        title=f"cross-device model v{row.version}: {row.rows} results, {row.seconds:.0f} s"
    )
    for name in (
        "family",
        "GPUs",
        "rows",
        f"zero-shot {level:.0%}",
        f"few-shot {level:.0%}",
        "calibration",
    ):
        table.add_column(name)
    for family, model in sorted(across.families.items()):
        table.add_row(
            family,
            str(len(model.offsets)),
            str(sum(model.rows.values())),
            _factor(model.zero_interval),
            _factor(model.few_interval),
            str(len(across.calibration.get(family, []))),
        )
    console.print(table)
    console.print(f"fitted on: {', '.join(sorted(across.facts))}")


def _factor(interval: tuple[float, float]) -> str:
    import math

    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "—"
    return f"×{math.exp(lo):.2f} … ×{math.exp(hi):.2f}"


@app.command()
def evaluate(
    held_out: Annotated[
        list[str] | None,
        typer.Option("--held-out", help="GPUs held out (default: NeuSight's L4 and A100 80GB)."),
    ] = None,
    other_db: Annotated[
        str | None,
        typer.Option(
            "--other-db",
            help="A database of a GPU from elsewhere (e.g. the H200 of ../shared/data/gpu), "
            "predicted zero-shot.",
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(help="NeuSight's folder, for the paper's whole-model errors."),
    ] = None,
    cap: CapOption = 3000,
    level: LevelOption = 0.9,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="The element type: float32 (every table), or float16 (leave one GPU out over "
            "the GPUs with float16 results, e.g. Vidur's); default: both, each where it has "
            "results."
        ),
    ] = None,
    db: DatabaseOption = None,
) -> None:
    """Print the held-out, leave-one-GPU-out, other-GPU and whole-model tables, then float16's."""
    from operator_db.predict.across.store import evaluation_frame, measured_runs

    if dtype not in (None, "float32"):
        _evaluate_dtype(dtype, cap, level, db)
        return
    with open_store(db) as store, store.transaction() as session:
        frame, facts = evaluation_frame(session)
        runs = measured_runs(session, facts)
        half = len(set(evaluation_frame(session, "float16")[0].get("kind", [])))
    if len(frame) or dtype == "float32":
        _evaluate_float32(frame, facts, runs, held_out, other_db, data, cap, level)
    if dtype is None and half >= 2:
        _evaluate_dtype("float16", cap, level, db)


def _evaluate_float32(
    frame: pd.DataFrame,
    facts: dict[str, GpuFacts],
    runs: list[Run],
    held_out: list[str] | None,
    other_db: str | None,
    data: Path | None,
    cap: int,
    level: float,
) -> None:
    """Print the float32 tables: held-out GPUs, leave one GPU out, other GPUs, whole models."""
    from operator_db.predict.across import evaluate as ev
    from operator_db.predict.across.train import fit_across

    held = [k for k in (held_out or DEFAULT_HELD_OUT) if k in set(frame.get("kind", []))]
    table, _ = ev.held_out_table(
        frame, facts, held, cap=cap, level=level, progress=err_console.print
    )
    _print(table)
    err_console.print("leave one GPU out: fitting every fold")
    everything = fit_across(
        frame, facts, level=level, cap=cap, keep_folds=True, progress=err_console.print
    )
    _print(ev.logo_table(everything, level, frame))
    if other_db:
        for t in _other(other_db, everything):
            _print(t)
    published = _published(data) if data else {}
    runs = [
        ev.Run(
            r.kind, r.model, r.mode, r.measured_s, r.configs, published.get((r.kind, r.model), {})
        )
        for r in runs
        if r.kind in facts
    ]
    whole = ev.whole_model_table(everything, runs, facts, frame)
    _print(whole)
    for kind in sorted({r[0] for r in whole.rows}):
        for mode in ("inference", "training"):

            def mine(r: list[object], k: str = kind, m: str = mode) -> bool:
                return r[0] == k and r[2] == m

            ours = ev.mean_abs(whole, 4, mine)
            few = ev.mean_abs(whole, 7, mine)
            theirs = ev.mean_abs(whole, 8, mine)
            if ours is not None:
                console.print(
                    f"{kind} {mode}: mean |error| ours {ours:.1f} % zero-shot"
                    + (f", {few:.1f} % few-shot" if few is not None else "")
                    + (f", NeuSight {theirs:.1f} %" if theirs is not None else "")
                )
    console.print(
        f"training on every GPU: {everything.rows} rows, {everything.seconds:.0f} s "
        f"(with its leave-one-GPU-out folds)"
    )


def _evaluate_dtype(dtype: str, cap: int, level: float, db: str | None) -> None:
    """Print leave one GPU out over the GPUs with results in ``dtype``."""
    from operator_db.errors import InvalidInputError
    from operator_db.predict.across import evaluate as ev
    from operator_db.predict.across.store import evaluation_frame
    from operator_db.predict.across.train import fit_across

    with open_store(db) as store, store.transaction(read_only=True) as session:
        frame, facts = evaluation_frame(session, dtype)
    kinds = sorted(set(frame["kind"])) if len(frame) else []
    if len(kinds) < 2:
        raise InvalidInputError(
            f"leave one GPU out needs {dtype} results on two GPU kinds with a spec sheet, found "
            f"{len(kinds)} (import Vidur's: `opdb import ../shared/data/vidur`)"
        )
    everything = fit_across(
        frame, facts, level=level, cap=cap, keep_folds=True, progress=err_console.print, dtype=dtype
    )
    _print(ev.logo_table(everything, level, frame, title=f" ({dtype})"))
    console.print(f"training on {dtype}: {everything.rows} rows, {everything.seconds:.0f} s")


def _other(url: str, across: object) -> list[Any]:
    from operator_db.db.store import Store
    from operator_db.predict.across import evaluate as ev
    from operator_db.predict.across.store import gpu_kinds, results_frame
    from operator_db.predict.across.train import Across

    assert isinstance(across, Across)
    tables = []
    other = Store.open(url, auto_upgrade_sqlite=True)
    with other.transaction() as session:
        for name, (kind, facts) in gpu_kinds(session).items():
            rows = results_frame(session, [kind])
            if len(rows) and name not in across.facts:
                tables.append(ev.other_gpu_table(across, rows, facts))
    return tables


def _published(root: Path) -> dict[tuple[str, str], dict[str, float]]:
    from operator_db.datasets.neusight.published import PREDICTORS, published

    out = {}
    for key, figures in published(root).items():
        measured = figures.get("measured")
        if measured:
            out[key] = {p: (figures[p] - measured) / measured for p in PREDICTORS if p in figures}
    return out


def _print(table: object) -> None:
    from operator_db.predict.across.evaluate import Table as Tab

    assert isinstance(table, Tab)
    out = Table(title=table.title)
    for c in table.columns:
        out.add_column(c)
    for r in table.rows:
        out.add_row(*(str(v) for v in r))
    console.print(out)


@app.command()
def calibrate(
    device: Annotated[
        str | None, typer.Option(help="Device to measure on (default: the first GPU, else CPU).")
    ] = None,
    store_only: Annotated[
        bool,
        typer.Option("--store-only", help="Store the calibration model; do not measure it here."),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Measure the calibration configurations on this host's GPU: its predictions go few-shot.

    The configurations are chosen by the stored cross-device model (50, a few per family); they
    are stored as the model ``opdb-calibration`` and measured here like any model.
    """
    from operator_db.predict.across.calibrate import CALIBRATION_MODEL, store_calibration

    with open_store(db) as store, store.transaction() as session:
        count = store_calibration(session)
    console.print(f"{CALIBRATION_MODEL}: {count} configurations to calibrate a new GPU on")
    if store_only:
        return
    from operator_db.cli.work import measure

    measure(CALIBRATION_MODEL, device=device, no_model_run=True, interleave=False, db=db)


def compare(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    db: DatabaseOption = None,
) -> None:
    """MODEL on every known device kind: measured or predicted, interval, bound, source."""
    from operator_db.predict.across.compare import compare as compare_kinds
    from operator_db.stats import format_ms

    with open_store(db) as store, store.transaction() as session:
        left: list[tuple[str, str]] = []
        rows = compare_kinds(session, model, on_error=lambda k, why: left.append((k, why)))
    table = Table(
        title=f"{model} on every device kind, fastest first (by its run where one is measured)"
    )
    for name in (
        "device kind",
        "how",
        "time ms",
        "interval ms",
        "run ms",
        "error vs run",
        "energy J",
        "bound by (roofline)",
        "coverage",
        "source",
    ):
        table.add_column(name)
    for r in rows:
        interval = (
            f"{format_ms(r.low_s)} … {format_ms(r.high_s)}"
            if r.low_s is not None and r.high_s is not None
            else "—"
        )
        table.add_row(
            r.device_kind,
            r.how,
            format_ms(r.time_s, "—"),
            interval,
            format_ms(r.full_run_s, "—"),
            r.run_error_text or "—",
            "—" if r.energy_j is None else f"{r.energy_j:.3g}",
            r.bound_by or "—",
            f"{r.coverage:.0%}",
            r.source,
            end_section=False,
        )
    console.print(table, soft_wrap=True)
    for r in rows:
        if r.flips_with:
            console.print(
                f"order flipped: the estimates put {r.device_kind} the other way round from "
                f"its run against {', '.join(r.flips_with)}; the runs rank them"
            )
    for kind, why in left:
        console.print(f"left out: {kind}: {why}")
    if not rows:
        console.print("no kind has figures for this model")
