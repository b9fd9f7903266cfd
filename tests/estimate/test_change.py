"""opdb diff: two results of a model or configuration, and whether they differ beyond noise."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig, utcnow
from operator_db.db.store import Store
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.change import ChangeQuery, compare_results, pick
from operator_db.specs import parse_spec
from tests.helpers import linear_op, result_row, run_cli, spec_dict

KIND = "fake:FakeGPU"


def _run(
    model_id: int, kind_id: int, host_id: int | None, ms: float, days_ago: int, **kw: object
) -> FullModelRun:
    samples = [ms * 1e-3 * (1 + d) for d in (-0.01, -0.005, 0.0, 0.0, 0.005, 0.01)] * 4
    return FullModelRun(
        model_id=model_id,
        device_kind_id=kind_id,
        host_id=host_id,
        **result_row(time_median_s=ms * 1e-3, created_at=utcnow() - timedelta(days=days_ago)),
        raw={"timings": [{"method": "eager", "calls_per_block": 1, "block_s": samples}]},
        **kw,
    )


def _seed(store: Store) -> None:
    spec = spec_dict("toy", [linear_op()])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "toy.yaml")])
        kind = queries.get_or_create_device_kind(session, KIND)
        h1 = queries.get_or_create_host(session, "alpha", "GPU-1", kind.id)
        h2 = queries.get_or_create_host(session, "beta", "GPU-2", kind.id)
        model_id = session.scalars(select(Model.id)).one()
        session.add(_run(model_id, kind.id, h1.id, 10.0, 3, provenance={"driver_version": "550"}))
        session.add(
            _run(model_id, kind.id, h1.id, 10.02, 2, provenance={"driver_version": "560"})
        )  # within noise of the first
        session.add(_run(model_id, kind.id, h2.id, 11.0, 1, provenance={"driver_version": "560"}))
        config_id = session.scalars(select(OperatorConfig.id)).one()
        for ms, days in ((1.0, 2), (1.0, 1)):
            session.add(
                Measurement(
                    config_id=config_id,
                    device_kind_id=kind.id,
                    **result_row(
                        time_median_s=ms * 1e-3, created_at=utcnow() - timedelta(days=days)
                    ),
                )
            )  # no samples kept: its noise is unknown


def test_selectors_and_verdicts(store: Store) -> None:
    _seed(store)
    with store.transaction() as session:
        newest = compare_results(session, ChangeQuery("toy", KIND))
        assert newest.a.host == "alpha" and newest.b.host == "beta"
        assert newest.change.value == pytest.approx(11.0 / 10.02 - 1)
        assert newest.verdict == "slower" and not newest.change.holds(0.0)
        same = compare_results(session, ChangeQuery("toy", KIND, a="driver:550", b="driver:560"))
        assert same.b.driver_version == "560" and same.b.host == "beta"  # newest with 560
        quiet = compare_results(
            session, ChangeQuery("toy", KIND, a="previous", b="before:2099-01-01")
        )
        assert quiet.verdict == "slower"
        early = compare_results(
            session, ChangeQuery("toy", KIND, a=f"id:{same.a.id}", b=str(same.a.id + 1))
        )
        assert early.verdict == "within noise"
        reverse = compare_results(session, ChangeQuery("toy", KIND, a="host:beta", b="host:alpha"))
        assert reverse.verdict == "faster"
        key = session.scalars(select(OperatorConfig.key)).one()
        config = compare_results(session, ChangeQuery("toy", KIND, config_key=key))
        assert config.verdict == "unknown"
        with pytest.raises(NotFoundError, match="host:gamma"):
            compare_results(session, ChangeQuery("toy", KIND, a="host:gamma"))
        with pytest.raises(InvalidInputError, match="same result"):
            compare_results(session, ChangeQuery("toy", KIND, a="newest"))
        with pytest.raises(InvalidInputError, match="unknown selector"):
            pick([], "yesterday")


def test_opdb_diff(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(store)
    url = store.url
    done = run_cli(capsys, "diff", "toy", "--db", url)
    assert done.code == 0, done.err
    assert "slower, beyond noise" in done.out and "beta" in done.out
    as_json = run_cli(
        capsys, "diff", "toy", "--a", "host:beta", "--b", "host:alpha", "--json", "--db", url
    )
    data = json.loads(as_json.out)
    assert data["verdict"] == "faster" and data["a"]["host"] == "beta"
    bad = run_cli(capsys, "diff", "toy", "--a", "host:gamma", "--db", url)
    assert bad.code != 0 and "host:gamma" in bad.err
