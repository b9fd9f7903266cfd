"""``opdb enqueue``, ``opdb worker``, ``opdb measure``, ``opdb jobs``: the measurement queue."""

from __future__ import annotations

import functools
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from operator_db.cli.common import (
    DatabaseOption,
    DeviceOption,
    console,
    err_console,
    open_store,
    progress_bar,
)
from operator_db.errors import DeviceContextLostError

if TYPE_CHECKING:  # torch and pandas behind these: imported by the commands that use them
    from operator_db.config import MeasureSettings
    from operator_db.db.store import Store
    from operator_db.worker.daemon import Worker, WorkerEvent, WorkerOptions, WorkerStats
    from operator_db.worker.execute import Companions


def enqueue(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    device_kind: Annotated[
        str, typer.Option("--device-kind", help="Device kind name, e.g. 'NVIDIA H100 80GB HBM3'.")
    ],
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    no_model_run: Annotated[
        bool, typer.Option("--no-model-run", help="Do not queue a full-model run.")
    ] = False,
    remeasure: Annotated[bool, typer.Option(help="Queue measured configurations again.")] = False,
    coverage: CoverageOption = 0.9,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave",
            help="Queue one job that measures the model and all its configurations in "
            "interleaved rounds on one host (docs/measurement.md).",
        ),
    ] = False,
    db: DatabaseOption = None,
) -> None:
    """Queue every configuration of MODEL not yet measured on a kind, plus a full-model run.

    The configurations that make up COVERAGE of the model's roofline-bound time go first.
    """
    if interleave and no_model_run:
        raise typer.BadParameter("--interleave measures the whole model: drop --no-model-run")
    from operator_db.estimate.significant import enqueue_significant_first

    with open_store(db) as store, store.transaction() as session:
        result = enqueue_significant_first(
            session,
            model,
            device_kind,
            priority=priority,
            with_model_run=not no_model_run,
            remeasure=remeasure,
            coverage=coverage,
            interleaved=interleave,
        )
    console.print(
        f"{result.model} on {result.device_kind}: queued {result.queued_configs} configurations"
        f"{' and a full-model run' if result.queued_model_run else ''}; "
        f"{result.already_measured} already measured, {result.already_queued} already queued, "
        f"{result.opaque} opaque (not measurable)"
    )


CoverageOption = Annotated[
    float,
    typer.Option(
        min=0.01,
        max=1.0,
        help="Share of the model's estimated time whose configurations are queued first.",
    ),
]


@contextmanager
def _stop_on_signals(worker: Worker) -> Iterator[None]:
    """First SIGTERM/SIGINT: finish the current job, then stop. Second: hand the job back now."""

    def handler(signum: int, _frame: object) -> None:
        if worker.stop_event.is_set():
            raise KeyboardInterrupt
        err_console.print(
            f"{signal.Signals(signum).name}: stopping after the current job "
            "(again to hand it back now)"
        )
        worker.stop()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_worker(
    store: Store,
    device_spec: str | None,
    options: WorkerOptions,
    measure_settings: MeasureSettings | None = None,
    companions: Companions | None = None,
) -> WorkerStats:
    """Open the device and run a worker on ``store`` with a progress display or log lines.

    ``measure_settings`` replace the settings' ``measure`` (a command's own budget);
    ``companions`` add targets to interleaved jobs' rounds (``worker.execute.execute_job``).
    """
    from operator_db.config import get_settings
    from operator_db.devices.factory import open_device
    from operator_db.worker.daemon import Worker
    from operator_db.worker.execute import execute_job

    settings = get_settings()
    with open_device(device_spec, settings=settings) as device:
        tty = console.is_terminal
        progress = progress_bar() if tty else None
        task = progress.add_task("measuring", total=None) if progress else None

        def on_event(event: WorkerEvent) -> None:
            if progress is not None and task is not None:
                if event.kind in ("done", "failed"):
                    progress.advance(task)
                if event.kind == "claimed":
                    progress.update(task, description=f"job {event.job_id}: {event.message}")
                elif event.kind in (
                    "failed",
                    "retry",
                    "lost",
                    "db_error",
                    "registered",
                    "context_lost",
                ):
                    progress.console.print(f"{event.kind}: {event.message}")
            else:
                job = f"job {event.job_id} " if event.job_id is not None else ""
                console.print(
                    f"worker {options.name}: {job}{event.kind}: {event.message}", markup=False
                )

        worker = Worker(
            store,
            device,
            measure_settings or settings.measure,
            options,
            on_event=on_event,
            executor=functools.partial(execute_job, companions=companions),
        )
        with _stop_on_signals(worker):
            try:
                if progress is not None:
                    with progress:
                        return worker.run()
                return worker.run()
            except DeviceContextLostError:
                _print_stats(worker.stats)  # then exit with EXIT_RESTART (cli/main.py)
                raise


def _print_stats(stats: WorkerStats) -> None:
    console.print(
        f"done {stats.done}, failed {stats.failed}, retried {stats.retried}, lost {stats.lost}, "
        f"handed back {stats.released}"
    )
    for error in stats.errors:
        err_console.print(f"failed: {error}", markup=False)


def worker(
    device: DeviceOption = None,
    max_jobs: Annotated[int | None, typer.Option(help="Stop after this many jobs.")] = None,
    until_idle: Annotated[bool, typer.Option(help="Stop when the queue is empty.")] = False,
    lease: Annotated[
        float, typer.Option(help="Job lease, in seconds (renewed while measuring).")
    ] = 300.0,
    poll: Annotated[float, typer.Option(help="Seconds between looks at an empty queue.")] = 2.0,
    db: DatabaseOption = None,
) -> None:
    """Take jobs for this host's device kind from the database and measure them."""
    from operator_db.worker.daemon import WorkerOptions

    # The schema is checked once the database answers: a worker started before its database
    # (a host's boot, a rollout) waits for it, as it does between jobs.
    with open_store(db, migrate=False) as store:
        stats = run_worker(
            store,
            device,
            WorkerOptions(
                lease_s=lease,
                poll_s=poll,
                max_jobs=max_jobs,
                until_idle=until_idle,
                check_schema=True,
            ),
        )
    _print_stats(stats)


def measure(
    model: Annotated[str, typer.Argument(help="Model name (see `opdb models list`).")],
    device: DeviceOption = None,
    no_model_run: Annotated[
        bool, typer.Option("--no-model-run", help="Do not measure the whole model.")
    ] = False,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave/--separate",
            help="Measure the model and its configurations in interleaved rounds (one job), or "
            "each configuration as its own job.",
        ),
    ] = True,
    remeasure: Annotated[bool, typer.Option(help="Measure measured configurations again.")] = False,
    db: DatabaseOption = None,
) -> None:
    """Measure MODEL on this machine: enqueue its configurations for the local device, then work.

    By default the whole model and its configurations are measured in interleaved rounds, so that
    the estimate and the measured model see the same machine; configurations that cannot be rebuilt
    are then queued alone, so that their own jobs say why.
    """
    interleave = interleave and not no_model_run
    with open_store(db) as store:
        stats = measure_models(
            store, [model], device, with_model_run=not no_model_run, interleave=interleave,
            remeasure=remeasure,
        )  # fmt: skip
    _print_stats(stats)
    if stats.failed:
        raise typer.Exit(1)


def measure_models(
    store: Store,
    models: Sequence[str],
    device: str | None,
    *,
    with_model_run: bool = True,
    interleave: bool = True,
    remeasure: bool = False,
    measure_settings: MeasureSettings | None = None,
    companions: Companions | None = None,
) -> WorkerStats:
    """Queue ``models`` for this machine's device kind, then work until the queue is empty.

    Each model and its configurations are measured in interleaved rounds (one job) unless
    ``interleave`` is False; configurations left out of the interleave are then queued alone.
    ``measure_settings`` replace the settings' ``measure``; ``companions`` add targets to the
    interleaved jobs' rounds.
    """
    from operator_db.config import get_settings
    from operator_db.db import queue
    from operator_db.devices.factory import open_device
    from operator_db.estimate.significant import enqueue_significant_first
    from operator_db.worker.daemon import WorkerOptions

    settings = get_settings()
    with open_device(device, settings=settings) as dev:
        kind = dev.identity().name
    for model in models:
        with store.transaction() as session:
            result = enqueue_significant_first(
                session,
                model,
                kind,
                with_model_run=with_model_run,
                remeasure=remeasure,
                interleaved=interleave,
            )
        how = " (interleaved with the model)" if interleave and result.queued_model_run else ""
        console.print(
            f"{model} on {kind}: {result.queued_configs} configurations to measure{how}, "
            f"{result.already_measured} already measured"
        )
    options = WorkerOptions(until_idle=True, poll_s=0.5)
    stats = run_worker(store, device, options, measure_settings, companions)
    if interleave:
        with store.transaction() as session:
            left = queue.enqueue_left_out(session, list(models), kind)
        if left:
            console.print(f"{left} left out of the interleave: measured alone")
            more = run_worker(store, device, options, measure_settings)
            stats = stats.plus(more)
    return stats


def jobs_status(db: DatabaseOption = None) -> None:
    """Show the queue: jobs per device kind and status."""
    from operator_db.db import queue

    with open_store(db) as store, store.transaction(read_only=True) as session:
        rows = queue.queue_counts_by_kind(session)
    table = Table("device kind", "status", "jobs")
    for name, status, count in rows:
        table.add_row(name, status, str(count))
    console.print(table)
