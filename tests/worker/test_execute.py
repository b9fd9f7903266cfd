"""Executing a job: autograd off once per inference job, operators timed in the model's regime."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sqlalchemy import select

from operator_db.config import MeasureSettings
from operator_db.db import queue
from operator_db.db.models import Measurement
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.measure.engine import operator_min_time_s
from operator_db.measure.settings import fast_settings
from operator_db.ops.build import build_op
from operator_db.specs.schema import OperatorSpec
from operator_db.worker import execute
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.worker.test_interleaved import ingest_mlp

LINEAR = OperatorSpec.model_validate(
    {
        "op": "torch.nn.Linear",
        "form": "module",
        "dtype": "float32",
        "args": {"in_features": 8, "out_features": 4},
        "inputs": [{"shape": [2, 8]}],
    }
)


def test_an_inference_op_enters_no_grad_only_when_called_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = build_op(LINEAR)
    entered = {"n": 0}
    real_no_grad = torch.no_grad

    class Counting(real_no_grad):  # type: ignore[misc, valid-type]
        def __enter__(self) -> None:
            entered["n"] += 1
            super().__enter__()

    with real_no_grad():
        monkeypatch.setattr(torch, "no_grad", Counting)
        for _ in range(10):
            built.run()
    assert entered["n"] == 0  # under the measurement's own no_grad: nothing per call
    out = built.run()  # on its own, autograd still records nothing
    assert entered["n"] == 1 and out.grad_fn is None


def test_inference_jobs_are_measured_with_autograd_off(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    seen: list[bool] = []
    real_measure = execute.measure

    def spy(run: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(torch.is_grad_enabled())
        return real_measure(run, *args, **kwargs)

    monkeypatch.setattr(execute, "measure", spy)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, with_model_run=False)
    Worker(store, device, fast_settings(), WorkerOptions(until_idle=True, poll_s=0.01)).run()
    assert seen == [False, False, False]


def test_operators_are_timed_as_long_as_their_energy_windows_where_energy_is_read() -> None:
    """Trials × window, at most a model's time: the regime their energy is read in."""
    device = FakeDevice(update_period_s=0.001)
    with_energy = fast_settings(operator_min_time_s=None, model_min_time_s=0.2)
    assert operator_min_time_s(device, with_energy) == pytest.approx(2 * 0.02)
    assert operator_min_time_s(device, MeasureSettings()) == pytest.approx(2 * 0.25)
    timed = MeasureSettings(energy_windows="timed")
    assert operator_min_time_s(device, timed) == 3.0  # the model's 3 s, not 4 × 5 s
    with_energy = with_energy.model_copy(update={"energy_window_s": 0.3})
    assert operator_min_time_s(device, with_energy) == 0.2
    assert operator_min_time_s(device, with_energy.model_copy(update={"energy": False})) == 0.0
    no_energy = FakeDevice(has_energy_counter=False, has_power=False)
    assert operator_min_time_s(no_energy, with_energy) == 0.0
    explicit = with_energy.model_copy(update={"operator_min_time_s": 0.05})
    assert operator_min_time_s(no_energy, explicit) == 0.05


def test_an_operator_job_times_the_operator_for_the_minimum_time(store: Store) -> None:
    ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    settings = fast_settings(
        operator_min_time_s=None,
        model_min_time_s=0.2,
        block_min_s=0.002,
        max_blocks=10_000,
        warmup_s=0.01,  # blocks sized from a warm-up, not one cold first call
        energy_window_s=0.1,  # 2 trials × 0.1 s: timed for 0.2 s
    )
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, with_model_run=False)
    Worker(store, device, settings, WorkerOptions(until_idle=True, poll_s=0.01)).run()
    with store.transaction(read_only=True) as session:
        rows = session.scalars(select(Measurement)).all()
    assert len(rows) == 3
    for row in rows:
        # Stretched beyond the 5 fixed blocks to 0.2 s on the clock. How many blocks that takes
        # depends on how fast the calls ran after the warm-up sized them: on a loaded CI host
        # 23 blocks of ~9 ms did it, where 0.002 s blocks would have taken 100.
        assert row.blocks > settings.blocks
        assert sum(row.raw["timings"][0]["block_s"]) >= 0.2
