"""The GPU's two stages over a model's calls in order: known answers, and the estimate's use."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Host, Measurement, Model, OperatorConfig
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.pipeline import Call, simulate
from operator_db.specs import parse_spec
from tests.helpers import linear_op, result_row, spec_dict

GPU = "NVIDIA Test GPU"


def test_host_bound_calls_back_to_back_cost_the_host_stage() -> None:
    pipe = simulate([Call(2.0, 1.0)] * 3)
    assert pipe.time_s == pytest.approx(6.0)  # the host issues the next pass meanwhile
    assert pipe.first_pass_s == pytest.approx(7.0)  # the last kernel after the last issue
    assert (pipe.host_busy_s, pipe.device_busy_s, pipe.bound_by) == (6.0, 3.0, "host")
    assert pipe.host_wait_s == 0.0 and pipe.syncs == 0


def test_device_bound_calls_cost_the_device_stage() -> None:
    pipe = simulate([Call(1.0, 2.0)] * 3)
    assert pipe.time_s == pytest.approx(6.0)
    assert pipe.first_pass_s == pytest.approx(7.0)  # 1 to issue the first, then 3 kernels
    assert pipe.bound_by == "device"


def test_a_sync_drains_the_queue_and_the_stages_stop_overlapping() -> None:
    """Small host-bound calls, then a large kernel whose result the host waits for: the host
    cannot issue the next pass during that kernel, so a pass costs the sum, not the max."""
    calls = [Call(1.0, 0.1)] * 4 + [Call(1.0, 10.0)]
    free = simulate(calls)
    assert free.time_s == pytest.approx(max(5.0, 10.4))  # no sync: max(Σ host, Σ device)
    synced = simulate(calls, syncs=[5])
    # The big kernel starts when issued at 5 and ends at 15; the host waits for it: 15 a pass.
    assert synced.time_s == pytest.approx(15.0) and synced.first_pass_s == pytest.approx(15.0)
    assert synced.host_wait_s == pytest.approx(10.0) and synced.syncs == 1
    # A sync in the middle waits for the kernels issued so far only.
    # Alone: issue 1, kernel to 4, the host waits to 4, issues at 5, the kernel ends at 8. Back
    # to back the next pass's first call is issued at 6, behind that kernel: 7 a pass.
    mid = simulate([Call(1.0, 3.0), Call(1.0, 3.0)], syncs=[1])
    assert mid.first_pass_s == pytest.approx(8.0) and mid.time_s == pytest.approx(7.0)


def test_bad_pipelines_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        simulate([Call(-1.0, 1.0)])
    with pytest.raises(ValueError, match="positions from 0 to 1"):
        simulate([Call(1.0, 1.0)], syncs=[2])


def _gpu_model(store: Store, *, syncs: list[int] | None) -> None:
    """Model 'seq': Linear A, Linear B, A again; host 1 ms a call, device 0.1 / 5 ms."""
    big = linear_op(16, 64)
    spec = spec_dict("seq", [linear_op(count=2), big])
    spec["calls"] = [0, 1, 0]
    if syncs is not None:
        spec["syncs"] = syncs
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "seq.yaml")])
        kind = get_or_create_device_kind(session, GPU)
        ids = [c for (c,) in session.execute(select(OperatorConfig.id).order_by(OperatorConfig.id))]
        for config_id, device_s in zip(ids, (0.1e-3, 5e-3), strict=True):
            row = Measurement(
                config_id=config_id, device_kind_id=kind.id, **result_row(time_median_s=device_s)
            )
            row.host_time_per_call_s = 1e-3
            session.add(row)
        host = Host(
            hostname="gpu-host",
            device_id="0",
            device_kind_id=kind.id,
            info={"host_cpu": {"model": "Test CPU", "usable_cores": 16, "max_mhz": 3500.0}},
        )
        session.add(host)
        session.flush()
        run = FullModelRun(
            model_id=session.scalars(select(Model.id)).one(),
            device_kind_id=kind.id,
            host_id=host.id,
            **result_row(time_median_s=6e-3),
        )
        run.hollow_host_time_s = 0.3e-3  # 0.1 ms of Python before each call
        session.add(run)


def test_a_gpu_estimate_follows_the_calls_in_order(store: Store) -> None:
    _gpu_model(store, syncs=[2])  # the host waits for B before the last A
    with store.transaction() as session:
        est = estimate_model(session, "seq", GPU)
    pipe = est.pipeline
    assert pipe is not None and pipe.syncs == 1
    # Host 1.1 ms a call; A issued at 1.1, B at 2.2 (ends 7.2); the host waits to 7.2, issues
    # the last A at 8.3, which ends at 8.4: a pass alone. Back to back, the next pass starts
    # issuing at 8.3, while that A runs: 8.3 ms a pass.
    assert pipe.first_pass_s == pytest.approx(8.4e-3)
    assert pipe.time_s == pytest.approx(8.3e-3)
    assert est.total_time_s == pytest.approx(8.3e-3) and est.bound_by == "device"
    # max(host 3.3 ms, device 5.2 ms) would say 5.2 ms.
    assert est.host_time_s == pytest.approx(3.3e-3) and est.time_s == pytest.approx(5.2e-3)
    assert est.summary()["pipeline"]["syncs"] == 1
    assert any("GPU pipeline over the calls in order" in n for n in est.notes)
    # The host stage names the CPU it was measured on.
    assert est.host_cpu == "Test CPU, 16 cores, 3500 MHz" == est.summary()["host_cpu"]
    assert "host stage measured on Test CPU, 16 cores, 3500 MHz" in est.notes


def test_without_a_sync_the_pipeline_is_the_longer_stage(store: Store) -> None:
    _gpu_model(store, syncs=None)
    with store.transaction() as session:
        est = estimate_model(session, "seq", GPU)
    assert est.pipeline is not None and est.total_time_s == pytest.approx(5.2e-3)


def test_a_gpu_replay_gives_the_host_and_device_times_in_context(store: Store) -> None:
    """Where the model's run replayed its calls on the GPU, the pipeline takes each call's issue
    time and device time from that replay (``--context alone``: from the loops)."""
    _gpu_model(store, syncs=None)
    with store.transaction() as session:
        ids = [c for (c,) in session.execute(select(OperatorConfig.id).order_by(OperatorConfig.id))]
        run = session.scalars(select(FullModelRun)).one()
        run.replay = {
            "per_call_s": {str(ids[0]): 0.2e-3, str(ids[1]): 5e-3},
            "host_per_call_s": {str(ids[0]): 2e-3, str(ids[1]): 2e-3},
        }
    with store.transaction() as session:
        est = estimate_model(session, "seq", GPU)
        alone = estimate_model(session, "seq", GPU, EstimateOptions(context="alone"))
    assert est.context == "replay" and alone.context == "alone"
    # In context: host 2.1 ms a call (6.3 ms a pass), device 5.4 ms: the host bounds it.
    assert est.pipeline is not None and est.pipeline.host_busy_s == pytest.approx(6.3e-3)
    assert est.total_time_s == pytest.approx(6.3e-3) and est.bound_by == "host"
    assert alone.total_time_s == pytest.approx(5.2e-3) and alone.bound_by == "device"


def test_graph_mode_has_no_host_stage_and_compares_with_the_graph_run(store: Store) -> None:
    """As one CUDA graph the model's host work is one launch: ``--timing graph`` is the device
    stage, compared with the model's graph-mode run."""
    _gpu_model(store, syncs=[2])
    with store.transaction() as session:
        kind_id = session.scalars(select(FullModelRun.device_kind_id)).one()
        graph_run = FullModelRun(
            model_id=session.scalars(select(Model.id)).one(),
            device_kind_id=kind_id,
            **result_row(timing="graph", time_median_s=5.3e-3),
        )
        session.add(graph_run)
    with store.transaction() as session:
        est = estimate_model(session, "seq", GPU, EstimateOptions(timing="graph"))
    assert est.host_time_s is None and est.pipeline is None and est.bound_by is None
    assert est.total_time_s == pytest.approx(5.2e-3) and est.full_run_time_s == 5.3e-3
    assert any(note.startswith("graph mode:") for note in est.notes)


def test_a_host_bound_model_draws_idle_power_while_the_device_waits(store: Store) -> None:
    """Each operator's back-to-back loop holds its dynamic energy and the idle power over its
    own time only; a host-bound model keeps the device idle longer. The total composes as the
    operators' dynamic energy + idle power × the estimated time, and says which part is static."""
    _gpu_model(store, syncs=None)
    with store.transaction() as session:
        # Host-bound: 1.1 ms of issue per call, 0.1 ms of device time for each small Linear.
        for row in session.scalars(select(Measurement)):
            row.time_median_s = 0.1e-3
            row.idle_power_w = 100.0
            row.dynamic_energy_per_call_j = 0.02  # 200 W over 0.1 ms on top of idle
            row.energy_per_call_j = 0.02 + 100.0 * 0.1e-3
        run = session.scalars(select(FullModelRun)).one()
        run.idle_power_w = 100.0
        run.energy_per_call_j = 0.06 + 100.0 * 3.3e-3  # what the device drew over the pass
    with store.transaction() as session:
        est = estimate_model(session, "seq", GPU)
        dynamic = estimate_model(session, "seq", GPU, EstimateOptions(energy="dynamic"))
    assert est.bound_by == "host" and est.total_time_s == pytest.approx(3.3e-3)
    assert est.static_energy_j == pytest.approx(100.0 * 3.3e-3)
    assert est.energy_j == pytest.approx(0.06 + 0.33)
    assert est.energy_error == pytest.approx(0.0, abs=1e-9)
    # Σ count × total energy per call: the idle power over 0.3 ms of kernels only (−77 % here).
    old = 3 * (0.02 + 100.0 * 0.1e-3)
    assert old < est.energy_j and est.summary()["static_energy_j"] == est.static_energy_j
    assert any(n.startswith("energy: operators' dynamic energy 0.06 J + static") for n in est.notes)
    assert dynamic.static_energy_j is None and dynamic.energy_j == pytest.approx(0.06)


def test_an_energy_that_composes_to_zero_or_less_is_none_with_a_note(store: Store) -> None:
    """Dynamic energies that are noise around zero can sum below 0 J, which no device draws:
    the estimate has no energy then, and says what the sum was (the LLM's rule too)."""
    _gpu_model(store, syncs=None)
    with store.transaction() as session:
        for row in session.scalars(select(Measurement)):
            row.time_median_s = 0.1e-3
            row.idle_power_w = 1.0
            row.dynamic_energy_per_call_j = -0.01  # noise below the idle baseline
            row.energy_per_call_j = 0.0
        session.scalars(select(FullModelRun)).one().idle_power_w = 1.0
    with store.transaction() as session:
        total = estimate_model(session, "seq", GPU)
        dynamic = estimate_model(session, "seq", GPU, EstimateOptions(energy="dynamic"))
    for est in (total, dynamic):
        assert est.energy_j is None and est.static_energy_j is None and est.energy_error is None
        assert est.energy_interval is None
        assert any(
            n.startswith("no energy: the operators' energy composed to -0.0") for n in est.notes
        )
