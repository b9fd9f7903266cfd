"""Ingestion: new, idempotent, replacing, shared configurations stored once, batch conflicts."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import Model, ModelOperator, OperatorConfig
from operator_db.db.queries import row_counts
from operator_db.db.store import Store
from operator_db.errors import ConflictError
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, run_cli, snapshot, spec_dict


def test_new_spec_is_stored(store: Store) -> None:
    loaded = parse_spec(spec_dict("toy"), "toy.yaml")
    with store.transaction() as session:
        [result] = ingest_specs(session, [loaded])
    assert (result.status, result.operators, result.new_configs, result.known_configs) == (
        "new",
        2,
        2,
        0,
    )
    with store.transaction() as session:
        counts = row_counts(session)
        model = session.scalars(select(Model)).one()
        links = session.execute(
            select(OperatorConfig.op, ModelOperator.count, ModelOperator.position)
            .join(ModelOperator)
            .order_by(ModelOperator.position)
        ).all()
        linear = session.scalars(
            select(OperatorConfig).where(OperatorConfig.op == "torch.nn.Linear")
        ).one()
    assert counts["models"] == 1 and counts["operator_configs"] == 2
    assert counts["model_operators"] == 2
    assert model.spec_hash == loaded.content_hash
    assert links == [("torch.nn.Linear", 1, 0), ("torch.nn.ReLU", 2, 1)]
    assert (linear.key, linear.flops, linear.params) == (loaded.keys[0], 4096, 544)
    assert linear.inputs == [{"shape": [4, 16], "dtype": "float32"}]


def test_reingest_changes_nothing(store: Store) -> None:
    loaded = parse_spec(spec_dict("toy"), "toy.yaml")
    with store.transaction() as session:
        ingest_specs(session, [loaded])
    before = snapshot(store.engine)
    with store.transaction() as session:
        [result] = ingest_specs(session, [parse_spec(spec_dict("toy"), "again.yaml")])
    assert result.status == "unchanged"
    assert snapshot(store.engine) == before


def test_shared_configurations_are_stored_once(store: Store) -> None:
    a = parse_spec(spec_dict("a", [linear_op(), relu_op([4, 32])]), "a.yaml")
    b = parse_spec(spec_dict("b", [linear_op(count=3), relu_op([4, 64])]), "b.yaml")
    with store.transaction() as session:
        results = ingest_specs(session, [a, b])
    assert [(r.new_configs, r.known_configs) for r in results] == [(2, 0), (1, 1)]
    with store.transaction() as session:
        assert row_counts(session)["operator_configs"] == 3
        counts = dict(
            session.execute(
                select(Model.name, func.sum(ModelOperator.count))
                .join(ModelOperator)
                .group_by(Model.name)
            ).all()
        )
    assert counts == {"a": 2, "b": 4}


def test_changed_spec_replaces_operator_list(store: Store) -> None:
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec_dict("toy"), "toy.yaml")])
        ingest_specs(session, [parse_spec(spec_dict("other", [linear_op()]), "other.yaml")])
    changed = spec_dict("toy", [linear_op(count=5), relu_op([4, 8])])
    with store.transaction() as session:
        [result] = ingest_specs(session, [parse_spec(changed, "toy.yaml")])
    assert (result.status, result.new_configs, result.known_configs) == ("replaced", 1, 1)
    with store.transaction() as session:
        rows = session.execute(
            select(OperatorConfig.op, OperatorConfig.inputs, ModelOperator.count)
            .join(ModelOperator)
            .join(Model)
            .where(Model.name == "toy")
            .order_by(ModelOperator.position)
        ).all()
        counts = row_counts(session)
    assert [(op, count) for op, _, count in rows] == [("torch.nn.Linear", 5), ("torch.nn.ReLU", 1)]
    assert rows[1][1] == [{"shape": [4, 8], "dtype": "float32"}]
    # The old ReLU configuration stays (it may have measurements); nothing is duplicated.
    assert counts["operator_configs"] == 3
    assert counts["models"] == 2 and counts["model_operators"] == 3


def test_same_model_twice_in_a_batch_with_other_content(store: Store) -> None:
    a = parse_spec(spec_dict("toy"), "a.yaml")
    other = copy.deepcopy(spec_dict("toy"))
    other["operators"][0]["count"] = 9
    b = parse_spec(other, "b.yaml")
    before = snapshot(store.engine)
    with (
        pytest.raises(ConflictError, match="b.yaml: model.name: 'toy' is also in a.yaml"),
        store.transaction() as session,
    ):
        ingest_specs(session, [a, b])
    assert snapshot(store.engine) == before


def test_failure_midway_rolls_back_everything(store: Store) -> None:
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec_dict("first"), "first.yaml")])
    before = snapshot(store.engine)
    good = parse_spec(spec_dict("second", [linear_op(8, 8)]), "second.yaml")

    class BoomError(Exception):
        pass

    with pytest.raises(BoomError), store.transaction() as session:
        ingest_specs(session, [good])
        raise BoomError
    assert snapshot(store.engine) == before


def test_training_and_inference_configurations_differ(store: Store) -> None:
    inference = parse_spec(spec_dict("inf", [linear_op()]), "i.yaml")
    training = parse_spec(spec_dict("train", [linear_op()], mode="training"), "t.yaml")
    with store.transaction() as session:
        results = ingest_specs(session, [inference, training])
        modes = sorted(session.scalars(select(OperatorConfig.mode)).all())
    assert [r.new_configs for r in results] == [1, 1]
    assert modes == ["inference", "training"]


def test_a_spec_that_disagrees_with_a_stored_configuration_is_named(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    # The same configuration (same key: op, arguments, inputs) with other FLOPs, bytes and
    # params: the first stored wins, and the second spec's ingest names it and the fields.
    first = linear_op()
    other = linear_op() | {"flops": 1, "bytes": 2, "params": 3}
    a = parse_spec(spec_dict("a", [relu_op([4, 32]), first]), "a.yaml")
    b = parse_spec(spec_dict("b", [other]), "b.yaml")
    with store.transaction() as session:
        _, result = ingest_specs(session, [a, b])
    assert result.disagreeing_configs == 1
    [found] = result.disagreements
    assert (found.position, found.op, found.inputs, found.key) == (
        0,
        "torch.nn.Linear",
        "4x16",
        b.keys[0],
    )
    assert [name for name, _, _ in found.fields] == ["flops", "bytes", "params"]
    assert result.warnings() == [
        f"b.yaml: operators[0] (torch.nn.Linear on 4x16) is configuration {b.keys[0]}, stored "
        f"with other flops (stored {first['flops']}, spec 1), bytes (stored {first['bytes']}, "
        f"spec 2), params (stored {first.get('params', 0)}, spec 3); the stored values are kept"
    ]
    with store.transaction() as session:
        stored = session.scalars(select(OperatorConfig).where(OperatorConfig.key == b.keys[0]))
        assert stored.one().flops == first["flops"]  # kept
    # Over the CLI the spec's own figures are counted again (ops.admission.recompute_costs):
    # they agree with the stored ones, so there is nothing to warn of.
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec_dict("c", [other])))
    done = run_cli(capsys, "ingest", str(path), "--db", db_url)
    assert done.code == 0, done.err
    assert "stored with other" not in done.out
