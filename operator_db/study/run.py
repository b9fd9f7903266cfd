"""Run a study: harvest each model at each batch size and mode, store it, measure the whole models.

The study is resumable: a model already in the database (same reference, mode and batch size) is
not harvested again, and one whose full-model run is stored on the device kind is not measured
again; a study that was stopped picks up its queued jobs. Per-operator measurement is optional
(``operators=True`` queues every configuration not measured yet as well).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from operator_db.db import queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.errors import ConflictError, NotFoundError, OperatorDBError
from operator_db.study.sets import StudyModel, StudySet

if TYPE_CHECKING:
    from operator_db.config import Settings
    from operator_db.db.store import Store
    from operator_db.devices.base import Device
    from operator_db.measure.peaks import MeasuredPeaks
    from operator_db.worker.daemon import WorkerEvent, WorkerStats

Mode = Literal["inference", "training"]
Status = Literal["measured", "stored", "failed", "not measured"]


@dataclass(frozen=True)
class StudyItem:
    """One run of the matrix: a model at a batch size in a mode."""

    model: StudyModel
    batch_size: int
    mode: Mode

    @property
    def name(self) -> str:
        """The model's name in the database: ``NAME-bB`` or ``NAME-train-bB``."""
        middle = "-train" if self.mode == "training" else ""
        return f"{self.model.name}{middle}-b{self.batch_size}"


@dataclass
class ItemOutcome:
    """What the study did with one item."""

    item: StudyItem
    harvested: bool = False
    """Harvested and stored by this run (False: it was in the database already, or failed)."""
    status: Status = "not measured"
    """``measured`` by this run; ``stored``: its run was measured before; ``failed``: why in
    ``detail``; ``not measured``: queued, not run (the study was stopped)."""
    detail: str = ""


@dataclass
class StudyResult:
    """A study's outcome: per item, the worker's counts, the time it took."""

    device_kind: str
    outcomes: list[ItemOutcome]
    worker: WorkerStats | None = None
    seconds: float = 0.0
    """Wall-clock time of the harvest and the measurement, in s."""
    peaks_measured: bool = False
    """Whether the study measured the device's peaks (its kind had none stored)."""
    reports: list[Path] = field(default_factory=list)

    def count(self, status: Status) -> int:
        """Return how many items ended with ``status``."""
        return sum(1 for o in self.outcomes if o.status == status)


def plan(
    study_set: StudySet,
    *,
    models: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    training_batch_sizes: Sequence[int] | None = None,
) -> list[StudyItem]:
    """Return the set's items, models in the set's order, inference before training.

    ``models`` keeps only those names (in the set's order); the batch sizes replace the set's.

    Raises:
        NotFoundError: a name in ``models`` is not in the set (the message lists the set's).
    """
    chosen = list(study_set.models)
    if models:
        names = [m.name for m in chosen]
        unknown = [m for m in models if m not in names]
        if unknown:
            raise NotFoundError(
                f"not in study set {study_set.name!r}: {', '.join(unknown)} "
                f"(it has {', '.join(names)})"
            )
        chosen = [m for m in chosen if m.name in models]
    inference = study_set.batch_sizes if batch_sizes is None else tuple(batch_sizes)
    training = (
        study_set.training_batch_sizes
        if training_batch_sizes is None
        else tuple(training_batch_sizes)
    )
    items: list[StudyItem] = []
    for model in chosen:
        items += [StudyItem(model, b, "inference") for b in inference]
        items += [StudyItem(model, b, "training") for b in training]
    return items


def harvest_item(item: StudyItem, spec_dir: Path) -> Path:
    """Harvest ``item`` on the meta device and write its spec; return the spec's path.

    Raises:
        HarvestError: the reference, its inputs or the model's forward failed (one line).
    """
    from operator_db.harvest import (
        harvest,
        load_reference,
        parse_input,
        parse_reference,
        with_batch,
    )
    from operator_db.harvest.refs import default_inputs

    ref = parse_reference(item.model.reference, item.model.overrides or None)  # type: ignore[arg-type]
    module = load_reference(ref)
    base = [parse_input(text) for text in item.model.inputs] or default_inputs(ref, module)
    if not base:
        raise OperatorDBError(f"{ref.text}: no default inputs known; give the set's inputs")
    result = harvest(
        module,
        with_batch(base, item.batch_size),
        reference=ref,
        mode=item.mode,
        name=item.name,
        description=f"{item.model.kind or 'model'} {ref.text}, batch {item.batch_size}, "
        f"{item.mode}; harvested by `opdb study`",
    )
    return result.write(spec_dir / f"{item.name}.yaml")


def _stored(store: Store, item: StudyItem) -> bool:
    """Whether the item's model is in the database already (raises if the name means another)."""
    with store.transaction(read_only=True) as session:
        try:
            model = queries.get_model(session, item.name)
        except NotFoundError:
            return False
        same = (
            model.mode == item.mode
            and model.batch_size == item.batch_size
            and (model.reference or "").split("?")[0] == item.model.reference
        )
    if not same:
        raise ConflictError(
            f"a model named {item.name!r} is in the database with another reference, mode or "
            "batch size: study it in another database (--db) or delete it"
        )
    return True


def _store(store: Store, path: Path, settings: Settings) -> None:
    from operator_db.ops.admission import load_admitted

    specs = load_admitted(
        [path],
        max_spec_bytes=settings.max_spec_bytes,
        max_tensor_numel=settings.max_tensor_numel,
        max_tensor_bytes=settings.max_tensor_bytes,
        max_call_flops=settings.max_call_flops,
        recompute=True,
    )
    with store.transaction() as session:
        ingest_specs(session, specs)


def prepare(
    store: Store,
    items: Sequence[StudyItem],
    kind: str,
    spec_dir: Path,
    settings: Settings,
    *,
    operators: bool = False,
    on_item: Callable[[ItemOutcome], None] | None = None,
) -> list[ItemOutcome]:
    """Harvest and store what is missing, and queue what is not measured on ``kind``.

    One item that fails (its harvest, or a name taken by another model) is marked ``failed`` with
    the reason; the others go on. ``on_item`` is called after each item.
    """
    spec_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[ItemOutcome] = []
    for item in items:
        outcome = ItemOutcome(item)
        try:
            if not _stored(store, item):
                _store(store, harvest_item(item, spec_dir), settings)
                outcome.harvested = True
            with store.transaction() as session:
                model = queries.get_model(session, item.name)
                kind_row = queries.get_or_create_device_kind(session, kind)
                measured = queries.has_model_run(session, model.id, kind_row.id)
                # With the operators, one interleaved job: the model and its configurations are
                # timed in the same rounds, so that the estimate sees the machine the run saw.
                queued = queue.enqueue_model(
                    session,
                    item.name,
                    kind,
                    operators=operators,
                    with_model_run=True,
                    interleaved=operators,
                )
            if measured and not queued.queued_configs:
                outcome.status = "stored"
        except OperatorDBError as exc:
            outcome.status, outcome.detail = "failed", str(exc).splitlines()[0]
        outcomes.append(outcome)
        if on_item is not None:
            on_item(outcome)
    return outcomes


def measure(
    store: Store,
    device: Device,
    settings: Settings,
    outcomes: Sequence[ItemOutcome],
    *,
    operators: bool = False,
    on_event: Callable[[WorkerEvent], None] | None = None,
) -> WorkerStats:
    """Run a worker on the device until the study's jobs are done; set each outcome's status.

    The worker takes only the study's models' jobs (their runs and configurations), never other
    jobs queued for the kind. Without ``operators`` it skips the hollow runs (the time between
    operators, which only an estimate uses).
    """
    from operator_db.worker.daemon import Worker, WorkerOptions

    with store.transaction(read_only=True) as session:
        ids = frozenset(
            queries.get_model(session, o.item.name).id for o in outcomes if o.status != "failed"
        )
    options = WorkerOptions(until_idle=True, poll_s=0.5, model_ids=ids)
    # Without the operators no estimate is composed: its hollow run would only cost time.
    measuring = settings.measure.model_copy(update={"hollow_run": operators})
    stats = Worker(store, device, measuring, options, on_event=on_event).run()
    if operators:
        # A configuration the interleaved job could not rebuild is measured alone, so that its
        # own job says why (as `opdb measure` does).
        names = [o.item.name for o in outcomes if o.status != "failed"]
        with store.transaction() as session:
            left = queue.enqueue_left_out(session, names, device.identity().name)
        if left:
            more = Worker(store, device, measuring, options, on_event=on_event).run()
            stats = stats.plus(more)
    with store.transaction(read_only=True) as session:
        kind = queries.get_device_kind(session, device.identity().name)
        for outcome in outcomes:
            if outcome.status in ("failed", "stored"):
                continue
            model = queries.get_model(session, outcome.item.name)
            if queries.has_model_run(session, model.id, kind.id):
                outcome.status = "measured"
                continue
            failed, _ = queue.list_jobs(session, status="failed", model_id=model.id, limit=1)
            if failed:
                outcome.status = "failed"
                outcome.detail = (failed[0].last_error or "the full-model run failed").splitlines()[
                    0
                ]
    return stats


def ensure_peaks(
    store: Store,
    device: Device,
    min_time_s: float,
    dtypes: Sequence[str] = ("float32",),
    *,
    again: bool = False,
) -> MeasuredPeaks | None:
    """Measure and store the device's peaks (``opdb peaks``) unless its kind has ``dtypes``'.

    The report draws the measured roof beside the spec sheet's. Each kernel is timed for
    ``min_time_s`` (s); ``again`` measures even where the kind has them. Returns what it
    measured, or None where the kind had them.
    """
    from operator_db.measure.peaks import measure_peaks
    from operator_db.roofline.peaks import peaks_for_kind
    from operator_db.roofline.record import record_peaks

    kind = device.identity().name
    with store.transaction(read_only=True) as session:
        if not again and peaks_for_kind(session, kind).has_measured(dtypes):
            return None
    measured = measure_peaks(device, dtypes=list(dtypes), min_time_s=min_time_s)
    with store.transaction() as session:
        record_peaks(session, measured)
    return measured


def run_study(
    store: Store,
    device: Device,
    items: Sequence[StudyItem],
    out_dir: Path,
    settings: Settings,
    *,
    operators: bool = False,
    on_item: Callable[[ItemOutcome], None] | None = None,
    on_event: Callable[[WorkerEvent], None] | None = None,
) -> StudyResult:
    """Harvest, store and measure ``items`` on ``device``; specs go to ``out_dir/specs``.

    Then the device's float32 peaks, unless its kind has them (the report's measured roof).
    """
    start = time.perf_counter()
    kind = device.identity().name
    outcomes = prepare(
        store, items, kind, out_dir / "specs", settings, operators=operators, on_item=on_item
    )
    stats = measure(store, device, settings, outcomes, operators=operators, on_event=on_event)
    peaks_measured = ensure_peaks(store, device, settings.measure.peak_min_time_s) is not None
    return StudyResult(kind, outcomes, stats, time.perf_counter() - start, peaks_measured)
