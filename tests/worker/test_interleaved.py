"""Interleaved model jobs: one job measures a model and its configurations in alternating rounds."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sqlalchemy import select, update

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Job, Measurement, ModelOperator, OperatorConfig
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.harvest import harvest
from operator_db.measure.flags import Flag
from operator_db.measure.settings import fast_settings
from operator_db.ops.build import OperatorBuildError
from operator_db.specs import parse_spec
from operator_db.worker import execute
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.helpers import linear_op, relu_op, run_cli, spec_dict


def ingest_mlp(store: Store, name: str = "tiny") -> int:
    """Harvest a small MLP (Linear, ReLU, Linear) into the store; return its configurations."""
    result = harvest(
        "module:operator_db.examples:mlp?hidden=[64]", torch.empty(4, 784, device="meta"), name=name
    )
    loaded = parse_spec(result.spec.model_dump(mode="json"), f"{name}.yaml")
    with store.transaction() as session:
        ingest_specs(session, [loaded])
    return len(result.spec.operators)


def run_worker(store: Store, device: FakeDevice) -> tuple[int, int]:
    stats = Worker(
        store,
        device,
        fast_settings(model_min_time_s=0.01),
        WorkerOptions(until_idle=True, poll_s=0.01),
    ).run()
    return stats.done, stats.failed


def run_interleaved_job(store: Store) -> None:
    """Queue the model 'tiny' as one interleaved job on the fake device and run it."""
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, interleaved=True)
    assert run_worker(store, device) == (1, 0)


def test_one_job_measures_the_model_and_every_configuration(store: Store) -> None:
    configs = ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    kind = device.identity().name
    with store.transaction() as session:
        queued = queue.enqueue_model(session, "tiny", kind, interleaved=True)
        job = session.scalars(select(Job)).one()
        assert (job.target, job.options) == ("model", {"interleaved": True})
    assert (queued.queued_configs, queued.queued_model_run) == (configs, True)
    assert run_worker(store, device) == (1, 0)
    with store.transaction(read_only=True) as session:
        measurements = session.scalars(select(Measurement)).all()
        run = session.scalars(select(FullModelRun)).one()
        assert len(measurements) == configs  # eager only on the fake device
        assert {m.job_id for m in measurements} == {run.job_id}
        assert "interleaved" in run.flags and all("interleaved" in m.flags for m in measurements)
        vocabulary = {flag.value for flag in Flag}  # a closed vocabulary: no messages in flags
        assert set(run.flags) <= vocabulary and all(
            set(m.flags) <= vocabulary for m in measurements
        )
        # The configurations, the model, its hollow run (Linear, ReLU, Linear stubbed) and the
        # replay of its calls in order.
        assert run.provenance["interleaved"] == {"targets": configs + 3, "rounds": 5}
        assert run.provenance["hollow"]["stubbed_modules"] == 3
        assert run.hollow_time_s is not None and run.hollow_time_s > 0
        assert all(m.blocks == run.blocks == 5 for m in measurements)
        # Each row keeps the per-call time inside its energy windows (trials of every target
        # take turns after the rounds).
        assert all(r.window_time_per_call_s is not None for r in [*measurements, run])
        assert all(len(r.raw["trials"]) == 2 for r in [*measurements, run])
        est = estimate_model(session, "tiny", kind)
        assert est.coverage == 1.0 and est.full_run_time_s == run.time_median_s
        assert est.between_ops_s is not None  # the MLP has no functional operator: the hollow run
        # Each configuration's time is the one inside the replay of the model's calls.
        assert run.replay is not None
        replayed = {int(k): v for k, v in run.replay["per_call_s"].items()}
        assert set(replayed) == {m.config_id for m in measurements}
        assert (run.replay["calls"], run.replay["chained"]) == (3, pytest.approx(2 / 3))
        assert run.replay["passes"] >= 5 and run.replay["time_s"] > 0
        assert est.context == "replay" and est.summary()["context"] == "replay"
        assert {r["timing"] for r in est.config_rows} == {"replay"}
        assert sorted(r["time_per_call_s"] for r in est.config_rows) == sorted(replayed.values())
        alone = estimate_model(session, "tiny", kind, EstimateOptions(context="alone"))
        assert alone.context == "alone" and {r["timing"] for r in alone.config_rows} == {"eager"}
        assert sorted(r["time_per_call_s"] for r in alone.config_rows) == sorted(
            m.time_median_s for m in measurements
        )
        # Nothing is missing: no second job; remeasure queues one again.
        again = queue.enqueue_model(session, "tiny", kind, interleaved=True)
        assert (again.queued_model_run, again.already_measured) == (False, configs)
        assert queue.enqueue_model(
            session, "tiny", kind, interleaved=True, remeasure=True
        ).queued_model_run


def test_a_configuration_that_cannot_be_built_is_left_out_and_named(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = ingest_mlp(store)
    real = execute._prepare_operator

    def prepare(config: OperatorConfig, *args: Any) -> Any:
        if config.op == "torch.nn.ReLU":
            raise OperatorBuildError("ReLU is broken today")
        return real(config, *args)

    monkeypatch.setattr(execute, "_prepare_operator", prepare)
    run_interleaved_job(store)
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        relu = session.scalars(select(OperatorConfig).where(OperatorConfig.op == "torch.nn.ReLU"))
        assert "interleaved_partial" in run.flags
        assert run.provenance["left_out"] == {relu.one().key: "ReLU is broken today"}
        measured = session.scalars(select(Measurement)).all()
        assert len(measured) == configs - 1


def test_measure_command_interleaves_then_measures_left_out_alone(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    configs = ingest_mlp(store)
    calls = {"relu": 0}
    real = execute._prepare_operator

    def prepare(config: OperatorConfig, *args: Any) -> Any:
        if config.op == "torch.nn.ReLU":
            calls["relu"] += 1
            raise OperatorBuildError("ReLU is broken today")
        return real(config, *args)

    monkeypatch.setattr(execute, "_prepare_operator", prepare)
    result = run_cli(capsys, "measure", "tiny", "--db", db_url)
    assert result.code == 1  # the left-out configuration's own job failed, and says why
    assert f"{configs} configurations to measure (interleaved with the model)" in result.out
    assert "1 left out of the interleave: measured alone" in result.out
    assert "done: model tiny with its operators, interleaved" in result.out
    assert "ReLU is broken today" in result.out + result.err
    assert calls["relu"] == 2  # once in the interleaved job, once alone (a build error: no retry)
    separate = run_cli(capsys, "measure", "tiny", "--separate", "--remeasure", "--db", db_url)
    assert "interleaved" not in separate.out


def test_a_separate_model_job_also_times_the_hollow_run(store: Store) -> None:
    configs = ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name)
    assert run_worker(store, device) == (configs + 1, 0)
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        assert "interleaved" not in run.flags
        assert run.hollow_time_s is not None and run.provenance["hollow"]["stubbed_modules"] == 3


def test_a_model_without_reference_is_queued_one_configuration_at_a_time(store: Store) -> None:
    spec = spec_dict("no-ref", [linear_op(), relu_op([4, 32])])
    del spec["model"]["reference"]
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "no-ref.yaml")])
        queued = queue.enqueue_model(session, "no-ref", "fake:FakeGPU", interleaved=True)
        targets = sorted(j.target for j in session.scalars(select(Job)))
    assert queued.queued_configs == 2 and targets == ["model", "operator", "operator"]


def test_a_spec_from_another_build_gets_no_hollow_run(store: Store) -> None:
    configs = ingest_mlp(store)
    with store.transaction() as session:
        session.execute(update(ModelOperator).values(locations=["not.in.this.build"]))
    run_interleaved_job(store)
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        assert run.hollow_time_s is None and "hollow_unavailable" in run.flags
        assert "'not.in.this.build'" in run.provenance["hollow_unavailable"]
        assert len(session.scalars(select(Measurement)).all()) == configs
        est = estimate_model(session, "tiny", "fake:FakeGPU")
        assert est.between_ops_s is None and est.total_time_s == est.time_s


def test_no_replay_without_a_call_order_or_when_turned_off(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec of version 2 has no call order: its model job times no replay, the estimate
    composes the operators looped alone; ``replay=False`` turns it off for any spec."""
    result = harvest(
        "module:operator_db.examples:mlp?hidden=[64]",
        torch.empty(4, 784, device="meta"),
        name="tiny",
    )
    data = result.spec.model_dump(mode="json")
    data.pop("calls")
    with store.transaction() as session:
        ingest_specs(session, [parse_spec({**data, "spec_version": 2}, "tiny.yaml")])
    run_interleaved_job(store)
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        assert run.replay is None and run.provenance["interleaved"]["targets"] == 3 + 2
        est = estimate_model(session, "tiny", FakeDevice().identity().name)
        assert est.context == "alone" and not any("replay" in n for n in est.notes)
    ingest_mlp(store, name="tiny2")  # with its call order, measured with the replay turned off
    device = FakeDevice(update_period_s=0.001)
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny2", device.identity().name, interleaved=True)
    stats = Worker(
        store,
        device,
        fast_settings(model_min_time_s=0.01, replay=False),
        WorkerOptions(until_idle=True, poll_s=0.01),
    ).run()
    assert (stats.done, stats.failed) == (1, 0)
    with store.transaction(read_only=True) as session:
        runs = session.scalars(select(FullModelRun)).all()
        assert [r.replay for r in runs] == [None, None]


def test_with_a_replay_the_model_blocks_are_as_short_as_the_replays_passes(store: Store) -> None:
    """A long model_min_time_s lengthens the model's blocks only where no replay compares."""
    ingest_mlp(store)
    device = FakeDevice(update_period_s=0.001)
    settings = fast_settings(model_min_time_s=0.5)  # 0.1 s blocks if lengthened
    with store.transaction() as session:
        queue.enqueue_model(session, "tiny", device.identity().name, interleaved=True)
    Worker(store, device, settings, WorkerOptions(until_idle=True, poll_s=0.01)).run()
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        assert run.replay is not None
        block_s = run.calls_per_block * run.time_median_s
        assert block_s < 0.02, block_s  # block_min_s (0.5 ms) sized, not 0.5 s / 5 blocks
