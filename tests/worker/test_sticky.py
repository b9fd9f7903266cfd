"""A sticky CUDA error: the job goes back to the queue, no CUDA call follows, the worker stops and
``opdb`` exits with EXIT_RESTART; out of memory stays a retry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from sqlalchemy import func, select

from operator_db.cli.main import EXIT_RESTART
from operator_db.config import FAST_FAKE_MEASURE, MeasureSettings
from operator_db.db import queue
from operator_db.db.models import FullModelRun, Job, Measurement
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.devices.fake import FakeDevice
from operator_db.errors import DeviceContextLostError
from operator_db.worker import execute
from operator_db.worker.daemon import WorkerEvent
from operator_db.worker.execute import JobInfo
from tests.helpers import REPO, run_cli
from tests.worker.test_daemon import enqueue, fixed_result, make_worker
from tests.worker.test_interleaved import ingest_mlp

ASSERT = "CUDA error: device-side assert triggered"


@pytest.fixture
def cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Pretend CUDA is there; record every call, and fail like a poisoned context does."""
    calls: list[str] = []

    def poisoned(name: str) -> Any:
        def call(*_a: Any, **_k: Any) -> None:
            calls.append(name)
            raise RuntimeError(f"{ASSERT}\nCUDA kernel errors might be asynchronously reported")

        return call

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("empty_cache", "synchronize", "reset_peak_memory_stats", "memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, poisoned(name))
    return calls


def job_states(store: Store) -> dict[int, tuple[str, int, str | None, str | None]]:
    with store.transaction(read_only=True) as session:
        return {
            j.id: (j.status, j.attempts, j.lease_owner, j.last_error)
            for j in session.scalars(select(Job).order_by(Job.id))
        }


def poison_job_one(
    _s: Any, job: JobInfo, _d: Device, _st: MeasureSettings, _i: float | None
) -> list[Any]:
    if job.id == 1:
        raise RuntimeError(f"{ASSERT}\nCompile with `TORCH_USE_CUDA_DSA` to enable assertions.")
    return fixed_result(job)


def test_sticky_error_hands_the_job_back_and_stops_without_cuda(
    store: Store, cuda_calls: list[str]
) -> None:
    enqueue(store)
    events: list[WorkerEvent] = []
    worker = make_worker(store, poison_job_one, events)
    with pytest.raises(DeviceContextLostError, match="device-side assert triggered"):
        worker.run()
    assert cuda_calls == []  # not even the empty_cache() that out-of-memory gets
    states = job_states(store)
    status, attempts, owner, error = states[1]
    assert (status, attempts, owner) == ("queued", 1, None)  # queued again, attempt counted
    assert error is not None and error.startswith(f"RuntimeError: {ASSERT}")
    assert "CUDA context lost" in error
    assert [s[:2] for s in (states[2], states[3])] == [("queued", 0), ("queued", 0)]  # untouched
    assert (worker.stats.retried, worker.stats.done) == (1, 0)
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["retry", "context_lost"]
    assert "restart" in events[-1].message
    # The same worker (this process) refuses to take another job.
    with pytest.raises(DeviceContextLostError):
        worker.run()
    assert job_states(store) == states and cuda_calls == []


def test_a_config_that_always_poisons_fails_after_max_attempts(
    store: Store, cuda_calls: list[str]
) -> None:
    enqueue(store, max_attempts=2)
    for _restart in range(2):  # each restart is a fresh process: a new worker
        with pytest.raises(DeviceContextLostError):
            make_worker(store, poison_job_one).run()
    status, attempts, _owner, error = job_states(store)[1]
    assert (status, attempts) == ("failed", 2)
    assert error is not None and ASSERT in error
    stats = make_worker(store, poison_job_one).run()  # the next process measures the rest
    assert (stats.done, stats.failed) == (2, 0)
    assert cuda_calls == []


def test_out_of_memory_still_retries_and_the_worker_goes_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    enqueue(store)
    freed: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append("empty_cache"))
    failed_once: set[int] = set()

    def executor(
        _s: Any, job: JobInfo, _d: Device, _st: MeasureSettings, _i: float | None
    ) -> list[Any]:
        if job.id not in failed_once:
            failed_once.add(job.id)
            if job.id == 1:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if job.id == 2:
                raise torch.AcceleratorError("CUDA error: out of memory")  # a failed cudaMalloc
        return fixed_result(job)

    events: list[WorkerEvent] = []
    worker = make_worker(store, executor, events)
    stats = worker.run()
    assert (stats.done, stats.retried, stats.failed) == (3, 2, 0)
    assert freed == ["empty_cache", "empty_cache"]  # the memory of each failed attempt
    assert worker.context_lost is None and "context_lost" not in [e.kind for e in events]
    assert {i: s[:2] for i, s in job_states(store).items()} == {
        1: ("done", 2),
        2: ("done", 2),
        3: ("done", 1),
    }


def test_an_unrecognised_error_with_a_dead_context_is_lost_too(
    store: Store, cuda_calls: list[str]
) -> None:
    enqueue(store)

    def executor(*_: Any) -> list[Any]:
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(...)`")

    with pytest.raises(DeviceContextLostError):
        make_worker(store, executor).run()
    assert cuda_calls == ["empty_cache"]  # the one cleanup call, which found the context dead
    _status, _attempts, _owner, error = job_states(store)[1]
    assert error is not None
    assert "CUBLAS_STATUS_EXECUTION_FAILED" in error and "empty_cache() failed" in error


def test_an_asynchronous_error_fails_the_job_that_caused_it(store: Store) -> None:
    """The worker synchronizes after each job: a kernel's late error is not blamed on the next."""
    enqueue(store)

    class LateAssert(FakeDevice):
        poisoned = False

        def synchronize(self) -> None:
            if self.poisoned:
                raise torch.AcceleratorError(ASSERT)

    device = LateAssert(update_period_s=0.001)

    def executor(
        _s: Any, job: JobInfo, _d: Device, _st: MeasureSettings, _i: float | None
    ) -> list[Any]:
        device.poisoned = True  # a kernel asserted; the job itself saw nothing yet
        return fixed_result(job)

    worker = make_worker(store, executor)
    worker.device = device
    with pytest.raises(DeviceContextLostError):
        worker.run()
    states = job_states(store)
    assert states[1][:2] == ("queued", 1) and ASSERT in str(states[1][3])
    assert [s[:2] for i, s in states.items() if i != 1] == [("queued", 0), ("queued", 0)]
    with store.transaction(read_only=True) as session:  # its rows were not written
        assert session.scalar(select(func.count()).select_from(Measurement)) == 0


def test_a_context_lost_between_jobs_stops_the_worker_before_it_claims(store: Store) -> None:
    """An ECC error while idle: the idle-power window's synchronize meets it; no job is taken."""
    enqueue(store)

    class Lost(FakeDevice):
        def synchronize(self) -> None:
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")

    events: list[WorkerEvent] = []
    worker = make_worker(store, poison_job_one, events)
    worker.device = Lost(update_period_s=0.001)
    with pytest.raises(DeviceContextLostError, match="ECC"):
        worker.run()
    assert {s[:2] for s in job_states(store).values()} == {("queued", 0)}
    assert events[-1].kind == "context_lost"


def test_an_interleaved_job_does_not_leave_out_a_sticky_configuration(
    store: Store, monkeypatch: pytest.MonkeyPatch, cuda_calls: list[str]
) -> None:
    ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, interleaved=True)
    real = execute._prepare_operator

    def prepare(config: Any, *args: Any) -> Any:
        if config.op == "torch.nn.ReLU":
            raise torch.AcceleratorError(ASSERT)
        return real(config, *args)

    monkeypatch.setattr(execute, "_prepare_operator", prepare)
    worker = make_worker(store, execute.execute_job)
    worker.device = device
    with pytest.raises(DeviceContextLostError):
        worker.run()
    assert job_states(store)[1][:2] == ("queued", 1)
    with store.transaction(read_only=True) as session:
        assert session.scalar(select(func.count()).select_from(FullModelRun)) == 0
    assert cuda_calls == []


def _poison_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    def poisoned(*_a: Any, **_k: Any) -> Any:
        raise torch.AcceleratorError(f"{ASSERT}\nSearch for `cudaErrorAssert'")

    monkeypatch.setattr(execute, "measure", poisoned)
    monkeypatch.setattr(execute, "measure_interleaved", poisoned)


def test_cli_worker_and_measure_exit_with_the_restart_code(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    cuda_calls: list[str],
) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    _poison_measuring(monkeypatch)
    ingest_mlp(store)
    kind = FakeDevice().identity().name
    assert run_cli(capsys, "enqueue", "tiny", "--device-kind", kind, "--db", db_url).code == 0
    worker = run_cli(capsys, "worker", "--until-idle", "--poll", "0.01", "--db", db_url)
    assert EXIT_RESTART == 75
    assert worker.code == EXIT_RESTART
    assert worker.err.startswith("error: the CUDA context is lost (AcceleratorError: ")
    assert "restart the worker" in worker.err and len(worker.err.strip().splitlines()) == 1
    assert "context_lost" in worker.out and "retried 1" in worker.out
    measured = run_cli(capsys, "measure", "tiny", "--remeasure", "--db", db_url)
    assert measured.code == EXIT_RESTART
    assert "left out of the interleave" not in measured.out  # no second round after the loss
    assert cuda_calls == []
    with store.transaction(read_only=True) as session:
        # Each process took one job and stopped at its error: two attempts in all, none running.
        assert session.scalar(select(func.sum(Job.attempts))) == 2
        assert queue.queue_counts(session).get("running", 0) == 0


def test_the_process_exits_with_the_restart_code(db_url: str, store: Store) -> None:
    """The console entry point: the code reaches the supervisor (no teardown in between)."""
    ingest_mlp(store)
    script = textwrap.dedent(
        f"""
        import sys, torch
        from operator_db.worker import execute
        def poisoned(*a, **k):
            raise torch.AcceleratorError({ASSERT!r})
        execute.measure = execute.measure_interleaved = poisoned
        sys.argv = ["opdb", "measure", "tiny", "--db", {db_url!r}]
        from operator_db.cli.main import entry
        entry()
        """
    )
    env = {**os.environ, **FAST_FAKE_MEASURE, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == EXIT_RESTART, done.stderr
    assert "error: the CUDA context is lost" in done.stderr
    assert "done 0, failed 0, retried 1" in done.stdout
