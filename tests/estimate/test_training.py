"""A training spec end to end: harvest, ingest, measure (fake device), estimate a training step."""

from __future__ import annotations

import pytest
import torch

from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.estimate.compose import estimate_model
from operator_db.harvest import harvest
from operator_db.measure.settings import fast_settings
from operator_db.specs import parse_spec
from operator_db.worker.daemon import Worker, WorkerOptions


def test_training_step_estimate(store: Store) -> None:
    result = harvest(
        "module:operator_db.examples:mlp?hidden=[64]",
        torch.empty(16, 784, device="meta"),
        name="tiny-train",
        mode="training",
    )
    spec = result.spec
    assert spec.model.mode == "training"
    linear = next(op for op in spec.operators if op.op == "torch.nn.Linear")
    # Backward of a Linear: grad input and grad weight, 2·m·n·k each.
    assert linear.flops_backward == 2 * linear.flops  # type: ignore[operator]
    loaded = parse_spec(spec.model_dump(mode="json"), "tiny-train.yaml")
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        ingest_specs(session, [loaded])
        queued = queue.enqueue_model(session, "tiny-train", device.identity().name)
    stats = Worker(
        store,
        device,
        fast_settings(model_min_time_s=0),
        WorkerOptions(until_idle=True, poll_s=0.01),
    ).run()
    assert (stats.done, stats.failed) == (queued.queued_configs + 1, 0)
    with store.transaction(read_only=True) as session:
        est = estimate_model(session, "tiny-train", device.identity().name)
    assert est.mode == "training" and est.coverage == 1.0
    assert est.time_s > 0 and est.full_run_time_s is not None and est.full_run_time_s > 0
    assert est.time_s == pytest.approx(
        float((est.configs["count"] * est.configs["time_per_call_s"]).sum())
    )
    assert any("optimizer step" in note for note in est.notes)
