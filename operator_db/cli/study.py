"""``opdb study``: models × batch sizes harvested, stored and measured whole, then the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, DeviceOption, console, open_store, progress_bar

if TYPE_CHECKING:
    from operator_db.db.store import Store
    from operator_db.devices.base import Device
    from operator_db.study.run import ItemOutcome, StudyItem, StudyResult
    from operator_db.worker.daemon import WorkerEvent


def _sizes(text: str | None) -> list[int] | None:
    """Parse ``1,2,4`` as ``opdb harvest -b`` does (None: not given; "" or "0": none at all).

    Raises:
        HarvestError: not positive integers.
    """
    from operator_db.harvest import parse_batch_sizes

    if text is None:
        return None
    if text.strip() in ("", "0"):
        return []
    return parse_batch_sizes(text)


def _summary(result: StudyResult) -> Table:
    table = Table("model", "batch", "mode", "spec", "run", title=f"study on {result.device_kind}")
    for o in result.outcomes:
        table.add_row(
            o.item.model.name,
            str(o.item.batch_size),
            o.item.mode,
            "harvested" if o.harvested else ("-" if o.status == "failed" else "stored before"),
            o.status + (f": {o.detail}" if o.detail else ""),
        )
    return table


def study(
    models: Annotated[
        list[str] | None,
        typer.Argument(help="Models of the set to study (default: all of them)."),
    ] = None,
    set_name: Annotated[
        str | None,
        typer.Option(
            "--set", help="Named set of models: cpu (the default on a CPU) or gpu (on a GPU)."
        ),
    ] = None,
    batch_size: Annotated[
        str | None,
        typer.Option(
            "--batch-size", "-b", help="Inference batch sizes, e.g. 1,8,32 (default: the set's)."
        ),
    ] = None,
    training_batch_size: Annotated[
        str | None,
        typer.Option(
            "--training-batch-size",
            help="Batch sizes of the training-step runs, e.g. 8 (0: none; default: the set's).",
        ),
    ] = None,
    operators: Annotated[
        bool,
        typer.Option(
            "--operators",
            help="Measure every operator configuration too (slower): the estimate, and pies by "
            "measured time instead of FLOPs and bytes.",
        ),
    ] = False,
    device: DeviceOption = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the specs and the report.")
    ] = Path("opdb-study"),
    report_only: Annotated[
        bool,
        typer.Option("--report-only", help="Measure nothing: write the report of what is stored."),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Study models × batch sizes here: harvest, store, measure whole models, write the report.

    Each model is measured whole in a forward pass at each batch size and in a training step
    (forward, backward, SGD step) at the training batch sizes; the report is Markdown and HTML.
    Resumable: what is stored is not harvested or measured again, so running it again after a stop
    goes on where it was.
    """
    from operator_db.config import get_settings
    from operator_db.devices.factory import open_device
    from operator_db.report import build_reports
    from operator_db.study.run import plan
    from operator_db.study.sets import get_set

    settings = get_settings()
    with open_store(db) as store:
        with open_device(device, settings=settings) as dev:
            chosen = get_set(set_name or ("gpu" if dev.identity().device_type == "gpu" else "cpu"))
            items = plan(
                chosen,
                models=models,
                batch_sizes=_sizes(batch_size),
                training_batch_sizes=_sizes(training_batch_size),
            )
            count = len({i.model.name for i in items})
            console.print(
                f"study set {chosen.name}: {len(items)} runs of {count} models on "
                f"{dev.identity().name}"
            )
            if report_only:
                names = [i.name for i in items]
            else:
                result = _run(store, dev, items, out, operators=operators)
                console.print(_summary(result))
                console.print(
                    f"{result.count('measured')} measured now, {result.count('stored')} stored "
                    f"before, {result.count('failed')} failed, in {result.seconds:.0f} s"
                    + ("; the device's peaks measured" if result.peaks_measured else "")
                )
                names = [o.item.name for o in result.outcomes if o.status != "failed"]
        with store.transaction(read_only=True) as session:
            for path in build_reports(
                session, out / "report", models=names, source=store.display_url
            ):
                console.print(f"wrote {path}")


def _run(
    store: Store, dev: Device, items: list[StudyItem], out: Path, *, operators: bool
) -> StudyResult:
    """Run the study with a progress display (log lines when not on a terminal)."""
    from operator_db.config import get_settings
    from operator_db.study.run import run_study

    tty = console.is_terminal
    progress = progress_bar(disable=not tty)
    harvest_task = progress.add_task("harvest and store", total=len(items))
    measure_task = progress.add_task("measure", total=None)

    to_measure = 0

    def on_item(outcome: ItemOutcome) -> None:
        nonlocal to_measure
        progress.advance(harvest_task)
        if not operators and outcome.status == "not measured":  # one full-model run each
            to_measure += 1
            progress.update(measure_task, total=to_measure)
        if outcome.status == "failed" or not tty:
            console.print(
                f"{outcome.item.name}: {'harvested' if outcome.harvested else outcome.status}"
                + (f": {outcome.detail}" if outcome.detail else ""),
                markup=False,
            )

    def on_event(event: WorkerEvent) -> None:
        if event.kind in ("done", "failed"):
            progress.advance(measure_task)
        if event.kind == "claimed":
            progress.update(measure_task, description=f"measure {event.message}")
        if not tty and event.kind in ("claimed", "failed"):
            console.print(f"{event.kind}: {event.message}", markup=False)

    with progress:
        return run_study(
            store,
            dev,
            items,
            out,
            get_settings(),
            operators=operators,
            on_item=on_item,
            on_event=on_event,
        )
