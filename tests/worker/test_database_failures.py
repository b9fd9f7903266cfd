"""The worker and a failing database: claims wait it out; loading and finishing are not retried."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from operator_db.db import queue
from operator_db.db.models import Job, Measurement, utcnow
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.errors import DatabaseError, SchemaMismatchError
from operator_db.measure.settings import fast_settings
from operator_db.worker.daemon import Worker, WorkerEvent, WorkerOptions
from operator_db.worker.execute import JobInfo
from tests.worker.test_daemon import counts, enqueue, fixed_result

SHUTTING_DOWN = DatabaseError(
    "database postgresql+psycopg://postgres@db/opdb is unavailable: "
    "the database system is shutting down"
)
"""What a claim met while PostgreSQL restarted (the chaos run's worker exited with it)."""
OUTAGE = 8
"""Failed claims in a row: more than the five after which the worker used to give up."""


def worker(
    store: Store,
    events: list[WorkerEvent],
    waits: list[float] | None = None,
    executor: Any = None,
    **options: Any,
) -> Worker:
    """A worker on the fake device that records its waits (``waits``: it does not sleep)."""
    return Worker(
        store,
        FakeDevice(update_period_s=0.001),
        fast_settings(),
        WorkerOptions(**{"until_idle": True, "poll_s": 0.01, "name": "w-test", **options}),
        executor=executor or (lambda _s, job, _d, _st, _i: fixed_result(job)),
        on_event=events.append,
        sleep=None if waits is None else waits.append,
    )


def flaky_claims(monkeypatch: pytest.MonkeyPatch, failures: int, before: Any = None) -> list[int]:
    """Make the next ``failures`` claims fail (``before(session)``, else raise SHUTTING_DOWN)."""
    real = queue.claim_job
    calls: list[int] = []

    def claim(session: Session, *args: Any, **kwargs: Any) -> Job | None:
        calls.append(1)
        if len(calls) <= failures:
            if before is None:
                raise SHUTTING_DOWN
            before(session)
        return real(session, *args, **kwargs)

    monkeypatch.setattr(queue, "claim_job", claim)
    return calls


def test_claims_wait_out_a_failing_database_then_the_jobs_are_measured(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    enqueue(store)
    flaky_claims(monkeypatch, OUTAGE)
    events: list[WorkerEvent] = []
    waits: list[float] = []
    stats = worker(store, events, waits).run()  # before: DatabaseError at the fifth failure
    assert (stats.done, stats.failed, stats.lost) == (3, 0, 0)
    assert counts(store) == (2, 1, {"done": 3})
    errors = [e.message for e in events if e.kind == "db_error"]
    assert len(errors) == OUTAGE and len(waits) == OUTAGE
    defaults = WorkerOptions()
    for n, (message, wait) in enumerate(zip(errors, waits, strict=True), start=1):
        longest = min(defaults.db_retry_cap_s, defaults.db_retry_s * 2 ** (n - 1))
        assert longest / 2 <= wait <= longest
        assert message == f"claiming failed ({n} in a row): {SHUTTING_DOWN}; again in {wait:.1f} s"
    assert waits[-1] <= defaults.db_retry_cap_s == 30.0


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    from operator_db.worker.backoff import claim_backoff_s

    assert [claim_backoff_s(n, 1.0, 30.0, 0.999999) for n in (1, 2, 3, 5, 6, 40)] == pytest.approx(
        [1.0, 2.0, 4.0, 16.0, 30.0, 30.0]
    )
    assert claim_backoff_s(3, 1.0, 30.0, 0.0) == 2.0  # the jitter takes off at most half


def test_a_set_limit_still_gives_up(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue(store)
    flaky_claims(monkeypatch, OUTAGE)
    events: list[WorkerEvent] = []
    with pytest.raises(DatabaseError, match="shutting down"):
        worker(store, events, [], max_db_failures=3).run()
    assert [e.message for e in events if e.kind == "db_error"][-1] == (
        f"claiming failed 3 times: {SHUTTING_DOWN}; giving up"
    )


def test_a_stop_ends_the_wait_for_the_database_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    enqueue(store)
    flaky_claims(monkeypatch, 10**6)
    events: list[WorkerEvent] = []
    w = worker(store, events, db_retry_s=60.0, until_idle=False)  # sleeps on its stop event
    threading.Timer(0.5, w.stop).start()  # what the first SIGTERM does (cli/work.py)
    started = time.monotonic()
    stats = w.run()
    assert time.monotonic() - started < 5.0
    assert stats.done == 0 and [e.kind for e in events].count("db_error") == 1


@contextmanager
def failing_transactions(store: Store, *, read_only: int, write: int) -> Iterator[None]:
    """Fail the next ``read_only`` read and ``write`` write transactions as a dead database."""
    real = store.transaction
    left = {True: read_only, False: write}

    @contextmanager
    def transaction(*, read_only: bool = False) -> Iterator[Session]:
        if left[read_only] > 0:
            left[read_only] -= 1
            raise SHUTTING_DOWN
        with real(read_only=read_only) as session:
            yield session

    store.transaction = transaction  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store.transaction


def test_a_job_whose_load_fails_is_left_to_its_lease_and_the_worker_goes_on(
    store: Store,
) -> None:
    enqueue(store, with_model_run=False)
    events: list[WorkerEvent] = []
    w = worker(store, events, [])
    w.register()  # the database goes down after the claim: loading job 1, then failing it fail
    assert w.kind_id is not None
    with store.transaction() as session:
        first = queue.claim_job(session, w.kind_id, "w-test", 300.0)
        assert first is not None and first.id == 1
    stats = w.stats
    with failing_transactions(store, read_only=1, write=1):
        w._work(1, "job one", stats)  # before: the DatabaseError of the failing ended the worker
    assert (stats.done, stats.lost) == (0, 1)
    [lost] = [e.message for e in events if e.kind == "lost"]
    assert lost == (
        f"job one: DatabaseError: {SHUTTING_DOWN}; not recorded ({SHUTTING_DOWN}): "
        "back to the queue when its lease expires"
    )
    with store.transaction() as session:
        job = session.get(Job, 1)
        assert job is not None
        assert (job.status, job.lease_owner, job.attempts) == ("running", "w-test", 1)
        session.execute(update(Job).where(Job.id == 1).values(lease_expires_at=utcnow()))
    assert w.run().done == 2  # the lease expired: job 1 is taken again, and job 2
    with store.transaction() as session:
        assert session.get(Job, 1).attempts == 2  # type: ignore[union-attr]
    assert counts(store) == (2, 0, {"done": 2})


def test_finishing_is_not_retried_even_when_its_commit_may_have_landed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that lands but whose answer is lost (the connection drops) must not be redone."""
    enqueue(store, with_model_run=False)
    finishes: list[int] = []
    real_finish = queue.finish_job

    def finish(session: Session, job_id: int, owner: str) -> bool:
        finishes.append(job_id)
        return real_finish(session, job_id, owner)

    dropped: list[int] = []

    class LostAnswer(Session):
        def commit(self) -> None:
            super().commit()
            if finishes == [1] and not dropped:  # job 1's finish landed; its answer does not
                dropped.append(1)
                raise OperationalError("COMMIT", None, Exception("server closed the connection"))

    monkeypatch.setattr(queue, "finish_job", finish)
    factory = sessionmaker(**{**store.sessions.kw, "class_": LostAnswer})
    monkeypatch.setattr(store, "sessions", factory)
    ran: list[int] = []

    def executor(_s: Any, job: JobInfo, _d: Any, _st: Any, _i: Any) -> list[Any]:
        ran.append(job.id)
        return fixed_result(job)

    events: list[WorkerEvent] = []
    stats = worker(store, events, [], executor).run()
    assert dropped == [1]
    assert finishes == [1, 2] and ran == [1, 2]  # finished once each, measured once each
    assert (stats.done, stats.lost) == (1, 1)
    [lost] = [e.message for e in events if e.kind == "lost"]
    assert lost.endswith(": lease lost while failing")  # fail_job found it done: nothing changed
    with store.transaction() as session:
        rows = session.execute(
            select(Measurement.job_id, func.count()).group_by(Measurement.job_id)
        )
        per_job = {job_id: n for job_id, n in rows}
        attempts = {job_id: n for job_id, n in session.execute(select(Job.id, Job.attempts))}
    assert per_job == {1: 1, 2: 1}  # job 1's result once: no second write, no second attempt
    assert attempts == {1: 1, 2: 1}
    assert counts(store)[2] == {"done": 2}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_worker_survives_its_connections_being_killed_before_claims(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    enqueue(store)
    admin = create_engine(store.url, isolation_level="AUTOCOMMIT")
    killed: list[int] = []

    def kill_my_connection(session: Session) -> None:
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with admin.connect() as conn:  # waits (up to 5 s) until the backend has gone
            assert conn.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid}).scalar()
        killed.append(pid)

    flaky_claims(monkeypatch, OUTAGE, before=kill_my_connection)
    events: list[WorkerEvent] = []
    try:
        stats = worker(store, events, []).run()  # before: DatabaseError at the fifth claim
    finally:
        admin.dispose()
    assert len(killed) == OUTAGE
    errors = [e.message for e in events if e.kind == "db_error"]
    assert len(errors) == OUTAGE
    assert all(" ended the connection: " in message for message in errors), errors
    assert (stats.done, stats.failed, stats.lost) == (3, 0, 0)
    assert counts(store) == (2, 1, {"done": 3})


def flaky_registering(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make the next ``failures`` registrations fail as a database that shuts down."""
    real = Worker.register
    calls: list[int] = []

    def register(self: Worker) -> int:
        calls.append(1)
        if len(calls) <= failures:
            raise SHUTTING_DOWN
        return real(self)

    monkeypatch.setattr(Worker, "register", register)
    return calls


def test_a_worker_waits_out_the_database_at_its_start(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started while PostgreSQL was down exited at once (the chaos run)."""
    enqueue(store)
    calls = flaky_registering(monkeypatch, OUTAGE)
    events: list[WorkerEvent] = []
    waits: list[float] = []
    stats = worker(store, events, waits).run()
    assert len(calls) == OUTAGE + 1 and len(waits) == OUTAGE
    assert stats.done > 0 and stats.failed == 0  # then it measured the queue
    assert [e.message for e in events if e.kind == "db_error"][0] == (
        f"registering failed (1 in a row): {SHUTTING_DOWN}; again in {waits[0]:.1f} s"
    )


def test_a_stop_ends_the_wait_at_the_start_too(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky_registering(monkeypatch, 10**6)
    events: list[WorkerEvent] = []
    w = worker(store, events, db_retry_s=60.0, until_idle=False)
    threading.Timer(0.5, w.stop).start()
    started = time.monotonic()
    stats = w.run()
    assert time.monotonic() - started < 5.0
    assert stats.done == 0 and [e.kind for e in events] == ["db_error"]


def test_opdb_worker_checks_the_schema_once_the_database_answers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos run: `opdb worker` checked the schema as it opened the database, before its wait,
    and exited 1 while PostgreSQL was down. The command opens the store unchecked and the worker
    checks it in its wait (``check_schema``); a database at another revision still stops it."""
    enqueue(store)
    checks: list[int] = []
    real = Store.ensure_current

    def away(self: Store) -> None:
        checks.append(1)
        if len(checks) <= OUTAGE:
            raise SHUTTING_DOWN
        real(self)

    monkeypatch.setattr(Store, "ensure_current", away)
    waits: list[float] = []
    stats = worker(store, [], waits, check_schema=True).run()
    assert len(checks) == OUTAGE + 1 and len(waits) == OUTAGE and stats.done > 0

    def behind(self: Store) -> None:
        raise SchemaMismatchError("database is at revision 0001, the code expects 0015")

    monkeypatch.setattr(Store, "ensure_current", behind)
    waits.clear()
    with pytest.raises(SchemaMismatchError):
        worker(store, [], waits, check_schema=True).run()
    assert waits == []


def test_a_worker_stopped_while_it_starts_exits_0(tmp_path: Path) -> None:
    """Chaos run: a worker started again after a SIGKILL and stopped (SIGTERM) at once ended
    with -15, which a supervisor reads as a crash; it held nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["OPDB_DATABASE_URL"] = f"sqlite:///{tmp_path / 'w.sqlite'}"
    process = subprocess.Popen(
        [sys.executable, "-m", "operator_db", "worker", "--device", "fake"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Once Python runs our code (its handler set: SIGTERM is caught), while it imports, long
    # before its device is open. Not after a fixed delay: on a loaded host Python's own start
    # outlasted 0.3 s, where no program can catch a signal yet (CI: -15).
    deadline = time.monotonic() + 60
    while not _catches_sigterm(process.pid) and time.monotonic() < deadline:
        assert process.poll() is None
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (Linux: ``SigCgt`` in its status)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False
