"""The worker loop with the fake device: results committed per job, failures, lost leases, stop."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sqlalchemy import func, select, update

from operator_db.db import queue
from operator_db.db.models import FullModelRun, Host, Job, Measurement
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.devices.fake import FakeDevice
from operator_db.errors import MeasurementError
from operator_db.measure.settings import MeasureSettings, fast_settings
from operator_db.worker.daemon import Worker, WorkerEvent, WorkerOptions
from operator_db.worker.execute import JobInfo
from tests.db.test_queue import KIND, seed
from tests.helpers import result_row


def fixed_result(job: JobInfo) -> list[Any]:
    common = result_row(device_kind_id=job.device_kind_id, job_id=job.id)
    if job.config_id is not None:
        return [Measurement(config_id=job.config_id, **common)]
    assert job.model_id is not None
    return [FullModelRun(model_id=job.model_id, **common)]


def make_worker(
    store: Store, executor: Any, events: list[WorkerEvent] | None = None, **options: Any
) -> Worker:
    device = FakeDevice(update_period_s=0.001)
    sink = events if events is not None else []
    return Worker(
        store,
        device,
        fast_settings(),
        WorkerOptions(until_idle=True, poll_s=0.01, name="w-test", **options),
        executor=executor,
        on_event=sink.append,
    )


def enqueue(store: Store, **kw: Any) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, **kw)


def counts(store: Store) -> tuple[int, int, dict[str, int]]:
    with store.transaction() as session:
        m = session.scalar(select(func.count()).select_from(Measurement)) or 0
        f = session.scalar(select(func.count()).select_from(FullModelRun)) or 0
        return m, f, queue.queue_counts(session)


def test_worker_measures_every_job_once(store: Store) -> None:
    enqueue(store)
    seen: list[int] = []

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        seen.append(job.id)
        assert idle is not None and idle == pytest.approx(100.0, rel=0.2)  # fake: 100 W
        return fixed_result(job)

    events: list[WorkerEvent] = []
    stats = make_worker(store, executor, events).run()
    assert (stats.done, stats.failed, stats.lost) == (3, 0, 0)
    assert sorted(seen) == [1, 2, 3]
    assert counts(store) == (2, 1, {"done": 3})
    assert [e.kind for e in events][:2] == ["registered", "idle_power"]
    assert events[-1].kind == "idle"
    with store.transaction() as session:
        host = session.scalars(select(Host)).one()
        assert host.device_kind.name == KIND
        assert host.idle_power_w == pytest.approx(100.0, rel=0.2)
        assert session.scalars(select(Measurement.host_id)).all() == [host.id, host.id]


def test_a_worker_on_an_empty_queue_starts_without_the_idle_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding: a worker's start took > 20 s on a loaded 2-core host; 5 s of it was the idle
    power window, measured before its first claim even where no job waited."""
    seed(store)  # the kind and its models, no job
    windows: list[float] = []

    def idle_power(device: Device, window_s: float) -> float:
        windows.append(window_s)
        return 100.0

    monkeypatch.setattr("operator_db.worker.daemon.idle_power_w", idle_power)
    events: list[WorkerEvent] = []
    stats = make_worker(store, fixed_result, events).run()
    assert stats.done == 0 and windows == []
    assert [e.kind for e in events] == ["registered", "idle"]
    # With a job waiting, the window comes before it is claimed (the lease does not tick).
    enqueue(store)
    events.clear()
    stats = make_worker(store, lambda *a: fixed_result(a[1]), events).run()
    assert stats.done == 3 and len(windows) == 1
    assert [e.kind for e in events][:3] == ["registered", "idle_power", "claimed"]


def test_failures_are_retried_then_failed_and_the_worker_goes_on(store: Store) -> None:
    enqueue(store, max_attempts=2)

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        if job.id == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if job.id == 2:
            raise MeasurementError("op produced NaN")
        if job.id == 3:
            raise TypeError("forward() got an unexpected keyword argument 'x'")
        return fixed_result(job)

    stats = make_worker(store, executor).run()
    # Out-of-memory and measurement errors are tried twice; a TypeError (bad input) once.
    assert (stats.done, stats.failed, stats.retried) == (0, 3, 2)
    assert counts(store) == (0, 0, {"failed": 3})
    with store.transaction() as session:
        rows = session.execute(select(Job.id, Job.last_error).where(Job.status == "failed"))
        errors = {job_id: error for job_id, error in rows}
    assert errors == {
        1: "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        2: "MeasurementError: op produced NaN",
        3: "TypeError: forward() got an unexpected keyword argument 'x'",
    }
    with store.transaction() as session:
        attempts = {i: n for i, n in session.execute(select(Job.id, Job.attempts))}
    assert attempts == {1: 2, 2: 2, 3: 1}


def test_lost_lease_drops_the_result(store: Store) -> None:
    enqueue(store, with_model_run=False)

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        if job.id == 1:  # another worker took the job over meanwhile
            with store.transaction() as other:
                other.execute(update(Job).where(Job.id == 1).values(lease_owner="w-other"))
        return fixed_result(job)

    stats = make_worker(store, executor).run()
    assert (stats.done, stats.lost) == (1, 1)
    m, _, queue = counts(store)
    assert m == 1
    assert queue == {"done": 1, "running": 1}


def test_interrupt_hands_the_job_back(store: Store) -> None:
    enqueue(store, with_model_run=False)

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        raise KeyboardInterrupt

    worker = make_worker(store, executor)
    with pytest.raises(KeyboardInterrupt):
        worker.run()
    with store.transaction() as session:
        job = session.get(Job, 1)
        assert job is not None
        assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, None)


def test_max_jobs_and_stop(store: Store) -> None:
    enqueue(store)
    worker = make_worker(store, lambda s, job, d, st, i: fixed_result(job), max_jobs=2)
    assert worker.run().done == 2
    assert counts(store)[2] == {"done": 2, "queued": 1}
    stopped = make_worker(store, lambda s, job, d, st, i: fixed_result(job))
    stopped.stop()
    assert stopped.run().done == 0


def test_dead_database_is_a_clear_error() -> None:
    from operator_db.errors import DatabaseError

    store = Store.open("postgresql+psycopg://postgres@127.0.0.1:1/none", migrate=False)
    # A worker waits out a dead database by default; this one may give up after two claims, so
    # that the test cannot wait forever where registering is not what fails.
    options = WorkerOptions(until_idle=True, max_db_failures=2, db_retry_s=0.01)
    worker = Worker(store, FakeDevice(), fast_settings(), options)
    with pytest.raises(DatabaseError, match="is unavailable"):
        worker.run()
    store.close()
