"""The worker pins torch's backend flags before each job and records them with every result."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from sqlalchemy import select

from operator_db.config import MeasureSettings
from operator_db.db import queue
from operator_db.db.models import FullModelRun, Measurement
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.devices.fake import FakeDevice
from operator_db.measure.backends import PINNED, backends_state, pin_backends, pinned_values
from operator_db.measure.settings import fast_settings
from operator_db.worker.daemon import Worker, WorkerOptions
from operator_db.worker.execute import JobInfo
from tests.worker.test_daemon import enqueue, fixed_result, make_worker
from tests.worker.test_interleaved import ingest_mlp


@pytest.fixture(autouse=True)
def _restore_torch() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    pin_backends(MeasureSettings(), threads)


def test_a_job_that_flips_flags_leaves_them_reset_for_the_next(store: Store) -> None:
    enqueue(store)  # jobs 1 and 2: configurations, 3: the model
    threads = torch.get_num_threads()
    seen: dict[int, dict[str, Any]] = {}

    def executor(
        _s: Any, job: JobInfo, _d: Device, _st: MeasureSettings, _i: float | None
    ) -> list[Any]:
        seen[job.id] = backends_state()
        if job.id == 1:  # model code that tunes the process for itself
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.enable_flash_sdp(False)
            torch.set_num_threads(threads + 1)
        return fixed_result(job)

    stats = make_worker(store, executor).run()
    assert stats.done == 3
    pinned = pinned_values(fast_settings(), threads)
    for job_id in (1, 2, 3):
        assert {k: seen[job_id][k] for k in pinned} == pinned, job_id
    with store.transaction(read_only=True) as session:
        rows = {
            r.job_id: r.provenance["backends"]
            for model in (Measurement, FullModelRun)
            for r in session.scalars(select(model))
        }
    # Job 1's rows say what it ran under (its own flips); the next jobs ran under the pinned ones.
    assert rows[1]["matmul_allow_tf32"] is True and rows[1]["cudnn_benchmark"] is True
    assert rows[1]["float32_matmul_precision"] == "high"  # torch's one state behind allow_tf32
    assert rows[1]["threads"] == threads + 1
    for job_id in (2, 3):
        assert {k: rows[job_id][k] for k in pinned} == pinned
        assert rows[job_id]["float32_matmul_precision"] == "highest"
        assert rows[job_id]["cudnn_benchmark"] is False and rows[job_id]["sdp_flash"] is True


def test_the_worker_pins_at_start(store: Store) -> None:
    enqueue(store, with_model_run=False)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    worker = make_worker(store, lambda s, job, d, st, i: fixed_result(job), max_jobs=0)
    worker.run()
    assert not torch.backends.cudnn.benchmark
    assert torch.get_float32_matmul_precision() == "highest"


def test_wanted_values_come_from_the_settings(store: Store) -> None:
    enqueue(store, with_model_run=False)
    settings = fast_settings(cudnn_benchmark=True, sdp_math=False, threads=1)
    Worker(
        store,
        FakeDevice(update_period_s=0.001),
        settings,
        WorkerOptions(until_idle=True, poll_s=0.01),
        executor=lambda s, job, d, st, i: fixed_result(job),
    ).run()
    with store.transaction(read_only=True) as session:
        for row in session.scalars(select(Measurement)):
            got = row.provenance["backends"]
            assert {k: got[k] for k in (*PINNED, "threads")} == pinned_values(settings, 1)
            assert (got["cudnn_benchmark"], got["sdp_math"], got["threads"]) == (True, False, 1)


def test_real_measurements_carry_the_flags(store: Store) -> None:
    configs = ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, interleaved=True)
    settings = fast_settings(model_min_time_s=0.01)
    stats = Worker(store, device, settings, WorkerOptions(until_idle=True, poll_s=0.01)).run()
    assert stats.done == 1
    with store.transaction(read_only=True) as session:
        rows = [*session.scalars(select(Measurement)), *session.scalars(select(FullModelRun))]
    assert len(rows) == configs + 1
    for row in rows:
        state = row.provenance["backends"]
        assert {k: state[k] for k in PINNED} == pinned_values(settings)
        assert state["threads"] == row.threads
        assert row.provenance["settings"]["float32_matmul_precision"] == "highest"
