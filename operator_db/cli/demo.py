"""``opdb demo``: the main job end to end on the embedded default (SQLite file, CPU).

Harvest a model into a spec, ingest it with the shipped example specs, measure every configuration
and the whole model on this machine, compose the estimate, compare it with the measured model, and
draw the roofline and the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from operator_db.cli.common import DatabaseOption, console, open_store
from operator_db.cli.ingest import admitted_specs, summary_table
from operator_db.errors import ConfigurationError


def example_specs_dir() -> Path:
    """Return the example specs: packaged in a wheel, ``measurement_specs/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_specs", here.parent / "measurement_specs"):
        if candidate.is_dir():
            return candidate
    raise ConfigurationError(f"example specs not found next to {here}")


DEMO_STUDY = ("mlp", "ftransformer", "mobilenetv2")
"""The models of the demo's small study (from the ``cpu`` set): the quickest three."""
STUDY_TIGHT_S = 2.0
"""The study's runs are measured until tight for at most this long each, s (the demo: ~3 min)."""


def demo(
    model: Annotated[
        str, typer.Option(help="Model reference to harvest and measure.")
    ] = "transformers:ResNetModel",
    name: Annotated[str, typer.Option(help="Its name in the database.")] = "demo-resnet50-b1",
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="Inputs as for `opdb harvest` (default: the model's)."),
    ] = None,
    device: Annotated[str, typer.Option(help="Device to measure on (cpu, nvidia, fake).")] = "cpu",
    out: Annotated[Path, typer.Option(help="Folder for the spec, roofline and report.")] = Path(
        "opdb-demo"
    ),
    study_models: Annotated[
        bool,
        typer.Option(
            "--study/--no-study",
            help=f"Also study {', '.join(DEMO_STUDY)} whole (batch sizes, a training step), so "
            "that every section of the report is filled.",
        ),
    ] = True,
    db: DatabaseOption = None,
) -> None:
    """Harvest MODEL, ingest it and the example specs, measure it here, estimate, plot, report.

    Then a small study (``opdb study``) of three more models measured whole, so that the report
    has batch sizes, correlations, forward:backward and layer pies to show (each run measured
    until tight for at most ``STUDY_TIGHT_S``).
    """
    from operator_db.cli.estimate import estimate, peaks, roofline
    from operator_db.cli.work import measure
    from operator_db.config import get_settings
    from operator_db.db.ingest import ingest_specs
    from operator_db.devices.factory import open_device
    from operator_db.harvest import harvest, parse_input
    from operator_db.report import build_reports
    from operator_db.study.run import plan, run_study
    from operator_db.study.sets import get_set

    out.mkdir(parents=True, exist_ok=True)
    console.rule("1. harvest")
    example = [parse_input(text) for text in inputs] if inputs else None
    result = harvest(model, example, name=name, description=f"{model}, harvested by `opdb demo`")
    spec_path = out / f"{name}.yaml"
    result.write(spec_path)
    console.print(
        f"{model}: {result.configurations} configurations, {result.calls} calls, "
        f"{result.flops / 1e9:.2f} GFLOPs per forward, on {result.device} in "
        f"{result.seconds:.2f} s → {spec_path}"
    )
    console.rule("2. ingest")
    specs = admitted_specs([example_specs_dir(), spec_path])
    with open_store(db) as store, store.transaction() as session:
        console.print(f"database: {store.display_url}")
        results = ingest_specs(session, specs)
    console.print(summary_table(results))
    console.rule(f"3. measure {name} on {device}")
    measure(name, device=device, no_model_run=False, db=db)
    console.rule("4. estimate")
    estimate(
        name,
        device_kind=None,
        timing="eager",
        energy="total",
        aggregate="latest",
        as_json=False,
        as_csv=False,
        top=10,
        db=db,
    )
    console.rule("5. peaks of this device (float32 matmul, copy)")
    peaks(device=device, dtypes="float32", list_table=False, missing=True, db=db)
    console.rule("6. roofline")
    roofline(name, device_kind=None, out=out / "roofline.png", chips="", as_csv=False, db=db)
    console.rule(f"7. a small study: {', '.join(DEMO_STUDY)} whole, at batch 1, 2, 4 and training")
    names = [name]
    if study_models:
        settings = get_settings()
        # Its runs illustrate the report's analyses: measured until tight for STUDY_TIGHT_S at
        # most (flagged `loose` beyond), so that the demo ends in about three minutes.
        brief = settings.measure.model_copy(
            update={"tight_budget_s": min(settings.measure.tight_budget_s, STUDY_TIGHT_S)}
        )
        settings = settings.model_copy(update={"measure": brief})
        with open_store(db) as store, open_device(device, settings=settings) as dev:
            items = plan(get_set("cpu"), models=list(DEMO_STUDY))
            studied = run_study(store, dev, items, out / "study", settings)
        console.print(
            f"{studied.count('measured')} runs measured, {studied.count('stored')} stored before, "
            f"{studied.count('failed')} failed, in {studied.seconds:.0f} s"
        )
        names += [o.item.name for o in studied.outcomes if o.status != "failed"]
    with open_store(db) as store, store.transaction(read_only=True) as session:
        for path in build_reports(session, out / "report", models=names, source=store.display_url):
            console.print(f"wrote {path}")
