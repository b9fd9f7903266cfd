"""``opdb study``: the plan, harvest + store + measure, resuming, failures, the worker's filter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from operator_db.config import FAST_FAKE_MEASURE, get_settings
from operator_db.db import queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.ops.admission import load_admitted
from operator_db.study.run import plan, run_study
from operator_db.study.sets import SETS, StudyModel, StudySet, get_set
from tests.helpers import EXAMPLE_SPECS, run_cli

OWN = "module:operator_db.examples:"

TINY = StudySet(
    name="tiny",
    description="two small models of ours and one that cannot be built",
    models=(
        StudyModel("mlp", f"{OWN}mlp", ("1x64",), {"inputs": 64, "hidden": [32]}),
        StudyModel("ft", f"{OWN}functional_transformer", ("1x8x32",), {"width": 32, "depth": 1}),
        StudyModel("broken", f"{OWN}no_such_factory", ("1x8",)),
    ),
    batch_sizes=(1, 2),
    training_batch_sizes=(2,),
)


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()


def test_the_shipped_sets_hold_ten_models_or_more_of_both_families() -> None:
    for study_set in SETS.values():
        kinds = {m.kind for m in study_set.models}
        assert len(study_set.models) >= 10
        assert any("CNN" in k for k in kinds) and any("transformer" in k for k in kinds)
        assert len({m.name for m in study_set.models}) == len(study_set.models)
        assert len(study_set.batch_sizes) >= 2 and study_set.training_batch_sizes
    assert get_set("gpu").batch_sizes == (1, 64, 256)
    with pytest.raises(InvalidInputError, match="cpu, gpu"):
        get_set("nope")


def test_the_plan_is_models_by_batch_sizes_inference_then_training() -> None:
    items = plan(TINY, models=["ft", "mlp"])
    assert [i.name for i in items] == [
        "mlp-b1",
        "mlp-b2",
        "mlp-train-b2",
        "ft-b1",
        "ft-b2",
        "ft-train-b2",
    ]
    assert [
        i.name for i in plan(TINY, models=["mlp"], batch_sizes=[4], training_batch_sizes=[])
    ] == ["mlp-b4"]
    with pytest.raises(NotFoundError, match="not in study set 'tiny': resnet"):
        plan(TINY, models=["resnet"])


def test_a_study_measures_every_run_once_and_resumes(
    store: Store, tmp_path: Path, fast: None
) -> None:
    device = FakeDevice(update_period_s=0.001)
    items = plan(TINY)
    seen: list[str] = []
    result = run_study(
        store, device, items, tmp_path, get_settings(), on_item=lambda o: seen.append(o.item.name)
    )
    by_name = {o.item.name: o for o in result.outcomes}
    assert seen == [i.name for i in items]
    assert {n: o.status for n, o in by_name.items() if not n.startswith("broken")} == {
        n: "measured" for n in ("mlp-b1", "mlp-b2", "mlp-train-b2", "ft-b1", "ft-b2", "ft-train-b2")
    }
    broken = [o for n, o in by_name.items() if n.startswith("broken")]
    assert len(broken) == 3 and all(o.status == "failed" and o.detail for o in broken)
    assert "no_such_factory" in broken[0].detail
    assert result.worker is not None and result.worker.done == 6
    assert result.peaks_measured  # the report's measured roof
    assert (tmp_path / "specs" / "mlp-train-b2.yaml").is_file()
    with store.transaction(read_only=True) as session:
        model = queries.get_model(session, "mlp-train-b2")
        kind = queries.get_device_kind(session, device.identity().name)
        assert (model.mode, model.batch_size) == ("training", 2)
        assert queries.has_model_run(session, model.id, kind.id)
        # whole models only: no operator configuration was queued or measured, no hollow run
        jobs, total = queue.list_jobs(session)
        assert total == 6 and {j.target for j in jobs} == {"model"}
        assert [r.hollow_time_s for r in session.scalars(select(FullModelRun))] == [None] * 6

    again = run_study(store, device, items, tmp_path, get_settings())
    statuses = {o.item.name: o.status for o in again.outcomes}
    assert [s for n, s in statuses.items() if not n.startswith("broken")] == ["stored"] * 6
    assert not any(o.harvested for o in again.outcomes)
    assert again.worker is not None and again.worker.done == 0
    assert not again.peaks_measured


def test_operators_are_measured_when_asked(store: Store, tmp_path: Path, fast: None) -> None:
    device = FakeDevice(update_period_s=0.001)
    items = plan(TINY, models=["mlp"], batch_sizes=[1], training_batch_sizes=[])
    result = run_study(store, device, items, tmp_path, get_settings(), operators=True)
    assert result.outcomes[0].status == "measured"
    with store.transaction(read_only=True) as session:
        jobs, _ = queue.list_jobs(session)
        configs = queries.model_configs(session, queries.get_model(session, "mlp-b1").id)
        runs = list(session.scalars(select(FullModelRun)))
    # One interleaved job measured the model and every configuration in the same rounds.
    assert [(j.target, j.status, (j.options or {}).get("interleaved")) for j in jobs] == [
        ("model", "done", True)
    ]
    with store.transaction(read_only=True) as session:
        kind_id = queries.get_device_kind(session, device.identity().name).id
        measured = queries.measured_config_ids(session, [c.config.id for c in configs], kind_id)
    assert len(measured) == len(configs)
    assert len(runs) == 1 and runs[0].hollow_time_s is not None  # what the estimate adds


def test_a_configuration_the_interleaved_job_cannot_build_is_measured_alone(
    store: Store, tmp_path: Path, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator_db.worker import execute

    device = FakeDevice(update_period_s=0.001)
    items = plan(TINY, models=["mlp"], batch_sizes=[1], training_batch_sizes=[])
    real = execute._prepare_operator
    calls: list[str] = []

    def first_relu_fails_once(config: Any, *args: Any) -> Any:
        if config.op.endswith("ReLU") and not calls:
            calls.append(config.key)
            raise RuntimeError("cannot build it now")
        return real(config, *args)

    monkeypatch.setattr(execute, "_prepare_operator", first_relu_fails_once)
    result = run_study(store, device, items, tmp_path, get_settings(), operators=True)
    assert result.outcomes[0].status == "measured" and calls
    with store.transaction(read_only=True) as session:
        jobs, _ = queue.list_jobs(session)
    alone = [j for j in jobs if j.target == "operator"]
    assert len(alone) == 1 and alone[0].status == "done"
    assert result.worker is not None and result.worker.done == 2


def test_the_study_worker_leaves_other_jobs_in_the_queue(
    store: Store, tmp_path: Path, fast: None
) -> None:
    device = FakeDevice(update_period_s=0.001)
    specs = load_admitted(
        [EXAMPLE_SPECS / "mlp-small-b8.yaml"], max_spec_bytes=10**7, max_tensor_numel=2**33
    )
    with store.transaction() as session:
        ingest_specs(session, specs)
        queue.enqueue_model(session, "mlp-small-b8", device.identity().name)
        waiting = queue.queue_counts(session)["queued"]
    items = plan(TINY, models=["mlp"], batch_sizes=[1], training_batch_sizes=[])
    result = run_study(store, device, items, tmp_path, get_settings())
    assert result.worker is not None and result.worker.done == 1
    with store.transaction(read_only=True) as session:
        assert queue.queue_counts(session)["queued"] == waiting


def test_a_name_taken_by_another_model_fails_that_run_only(
    store: Store, tmp_path: Path, fast: None
) -> None:
    device = FakeDevice(update_period_s=0.001)
    first = plan(TINY, models=["mlp"], batch_sizes=[1], training_batch_sizes=[])
    run_study(store, device, first, tmp_path, get_settings())
    other = StudySet(
        "other", "", (StudyModel("mlp", f"{OWN}functional_transformer", ("1x8x32",)),), (1,), ()
    )
    result = run_study(store, device, plan(other), tmp_path, get_settings())
    assert result.outcomes[0].status == "failed"
    assert "another reference" in result.outcomes[0].detail


def test_the_command_runs_a_study_and_writes_both_reports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SETS, "tiny", TINY)
    out = tmp_path / "study"
    args = ("study", "mlp", "--set", "tiny", "--device", "fake", "-o", str(out), "-b", "1,2")
    done = run_cli(capsys, *args)
    assert done.code == 0, done.err
    assert "3 measured now, 0 stored before, 0 failed" in done.out
    assert (out / "report" / "report.md").is_file() and (out / "report" / "report.html").is_file()
    again = run_cli(capsys, *args)
    assert again.code == 0 and "0 measured now, 3 stored before" in again.out
    bad = run_cli(capsys, "study", "--set", "tiny", "-b", "0x", "--device", "fake")
    assert bad.code != 0 and "positive integers" in bad.err
