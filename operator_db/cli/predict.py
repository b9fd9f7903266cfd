"""``opdb predict train|list|evaluate``: cost models of what is not measured yet."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from operator_db.cli import across as across_cli
from operator_db.cli.common import DatabaseOption, console, open_store

app = typer.Typer(
    help="Predictors of per-call cost trained on the database: train, list, evaluate.",
    no_args_is_help=True,
)
app.add_typer(across_cli.app, name="across")

KindOption = Annotated[
    str | None,
    typer.Option("--device-kind", help="Device kind (default: the only one in the database)."),
]
LevelOption = Annotated[
    float,
    typer.Option(min=0.5, max=0.99, help="Nominal coverage of the prediction intervals."),
]
MinPerOpOption = Annotated[
    int,
    typer.Option(
        min=3, help="Measured configurations an operator type needs for a model of its own."
    ),
]


@app.command()
def train(
    device_kind: KindOption = None,
    level: LevelOption = 0.9,
    min_per_op: MinPerOpOption = 12,
    db: DatabaseOption = None,
) -> None:
    """Fit the kind's predictors on every configuration measured there, stored as a new version."""
    import time

    from operator_db.db import queries
    from operator_db.predict.model import interval_text
    from operator_db.predict.store import train as train_predictor

    started = time.perf_counter()
    with open_store(db) as store, store.transaction() as session:
        predictor = train_predictor(
            session,
            queries.sole_device_kind(session, device_kind),
            level=level,
            min_per_op=min_per_op,
        )
    seconds = time.perf_counter() - started
    table = Table(
        "target",
        "operator type",
        "samples",
        "estimator",
        "CV median error",
        f"{level:.0%} interval",
        title=f"predictor v{predictor.version} of {predictor.device_kind} "
        f"({predictor.samples} configurations, {seconds:.1f} s)",
    )
    for (target, op), m in sorted(predictor.models.items()):
        table.add_row(
            target,
            op,
            str(m.samples),
            m.kind,
            "-" if m.cv_median_error is None else f"{m.cv_median_error:.1%}",
            interval_text(m.interval_ln),
        )
    console.print(table)
    console.print(f"training data {predictor.data_hash[:12]}")


@app.command("list")
def list_predictors(device_kind: KindOption = None, db: DatabaseOption = None) -> None:
    """List the stored predictors, newest version first (estimates use the newest)."""
    from operator_db.db import queries
    from operator_db.predict.model import interval_text

    with open_store(db) as store, store.transaction(read_only=True) as session:
        kinds = {k.id: k.name for k in queries.device_kinds(session)}
        ids = None if device_kind is None else [queries.get_device_kind(session, device_kind).id]
        rows = queries.list_predictors(session, ids)
        table = Table(
            "kind",
            "version",
            "trained",
            "target",
            "operator type",
            "samples",
            "estimator",
            "CV median error",
            "interval",
            "data",
        )
        for r in rows:
            table.add_row(
                kinds.get(r.device_kind_id, "?"),
                str(r.version),
                r.created_at.strftime("%Y-%m-%d %H:%M"),
                r.target,
                r.op,
                str(r.samples),
                str(r.library.get("estimator", "")),
                "-" if r.cv_median_error is None else f"{r.cv_median_error:.1%}",
                f"{r.level:.0%} {interval_text(r.interval_ln)}",
                r.data_hash[:12],
            )
    console.print(table if rows else "no predictors yet: `opdb predict train`")


@app.command()
def evaluate(
    device_kind: KindOption = None,
    hold_out: Annotated[
        str,
        typer.Option(
            help="model (each model in turn) or family (every batch size of a model at once)."
        ),
    ] = "model",
    level: LevelOption = 0.9,
    min_per_op: MinPerOpOption = 12,
    model: Annotated[
        list[str] | None, typer.Option(help="Hold out only this model (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write the per-configuration results here.")
    ] = None,
    db: DatabaseOption = None,
) -> None:
    """Leave each model out, predict it from the rest, and compare with its measurements."""
    from operator_db.db import queries
    from operator_db.predict.evaluate import evaluate as run

    if hold_out not in ("model", "family"):
        raise typer.BadParameter("--hold-out is model or family")
    with open_store(db) as store, store.transaction(read_only=True) as session:
        result = run(
            session,
            queries.sole_device_kind(session, device_kind),
            hold_out="family" if hold_out == "family" else "model",
            level=level,
            min_per_op=min_per_op,
            models=model,
        )
    if csv_out is not None:
        with csv_out.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["group", "key", "op", "measured_s", "predicted_s", "low_s", "high_s"])
            for c in result.configs:
                writer.writerow(
                    [c.group, c.key, c.op, c.measured_s, c.predicted_s, c.low_s, c.high_s]
                )
    summary = result.summary()
    if as_json:
        models = [
            {
                **vars(m),
                "error": m.error,
                "measured_error": m.measured_error,
                "operators_error": m.operators_error,
            }
            for m in result.models
        ]
        sys.stdout.write(json.dumps({**summary, "models": models}, indent=2) + "\n")
        return
    table = Table(
        "model",
        "full run (ms)",
        "measured estimate",
        "predicted estimate",
        "error",
        f"{level:.0%} interval (ms)",
        title=f"leave one {hold_out} out on {result.device_kind}",
    )
    for m in sorted(result.models, key=lambda m: m.model):
        table.add_row(
            m.model,
            f"{m.full_run_s * 1e3:.3f}",
            "-" if m.measured_error is None else f"{m.measured_error:+.1%}",
            f"{m.predicted_s * 1e3:.3f}",
            f"{m.error:+.1%}",
            f"{m.low_s * 1e3:.3f} – {m.high_s * 1e3:.3f}",
        )
    console.print(table)

    def pct(key: str) -> str:
        value = summary[key]
        return "-" if not isinstance(value, float) else f"{value:.1%}"

    console.print(
        f"{result.groups} held out, {result.samples} measured configurations, "
        f"{result.seconds:.1f} s\n"
        f"median |error| per configuration {pct('config_median_error')} "
        f"({len(result.configs)} configurations), per model {pct('model_median_error')} "
        f"(measured estimate: {pct('measured_estimate_median_error')}; Σ operators predicted "
        f"against Σ measured: {pct('operators_median_error')})\n"
        f"{level:.0%} intervals hold the measured value for {pct('interval_coverage')} of "
        f"configurations, the full run for {pct('model_interval_coverage')} of models"
    )
