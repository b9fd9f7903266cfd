"""``predict.across.compare.ranked``: the runs rank the kinds, and flips are named."""

from __future__ import annotations

import pytest

from operator_db.predict.across.compare import KindRow, ranked


def row(
    kind: str, time_s: float | None, run_s: float | None = None, how: str = "measured"
) -> KindRow:
    return KindRow(kind, how, time_s, None, None, None, None, 1.0, "neusight", run_s)


def test_a_run_ranks_its_kind_before_the_estimate_does() -> None:
    # The case: the V100's estimate (700 ms) is below the A100's (727 ms), whose run
    # (536 ms) beats the V100's (729 ms).
    rows = ranked(
        [row("A100", 0.727, 0.536), row("V100", 0.700, 0.729), row("H100", 0.199, how="predicted")]
    )
    assert [r.device_kind for r in rows] == ["H100", "A100", "V100"]
    assert [r.rank_s for r in rows] == [0.199, 0.536, 0.729]
    by = {r.device_kind: r for r in rows}
    assert by["A100"].flips_with == ("V100",)
    assert by["V100"].flips_with == ("A100",)
    assert by["H100"].flips_with == ()


def test_estimates_in_the_runs_order_flip_nothing() -> None:
    rows = ranked([row("b", 2.0, 2.2), row("a", 1.0, 1.1), row("c", None)])
    assert [r.device_kind for r in rows] == ["a", "b", "c"]
    assert all(not r.flips_with for r in rows)


def test_a_kind_known_only_by_its_run_flips_nothing() -> None:
    rows = ranked([row("a", 1.0, 3.0), row("b", 2.0, 2.0, how="measured run")])
    assert [r.device_kind for r in rows] == ["b", "a"]
    assert all(not r.flips_with for r in rows)


def test_the_error_against_the_run_in_words() -> None:
    single = KindRow("a", "measured", 1.355, None, None, None, None, 1.0, "x", 1.0, run_error=0.355)
    assert single.run_verdict == "no interval"
    assert single.run_error_text == "+35.5 % (no interval: imported as one figure)"
    beyond = KindRow(
        "a", "measured", 1.1, None, None, None, None, 1.0, "x", 1.0, None, 0.1, 0.05, 0.15
    )
    assert beyond.run_verdict == "beyond noise"
    assert beyond.run_error_text == "+10.0 % (+5.0 … +15.0 %, 95 %), beyond noise"
    within = KindRow(
        "a", "measured", 0.98, None, None, None, None, 1.0, "x", 1.0, None, -0.02, -0.06, 0.03
    )
    assert within.run_verdict == "within noise"
    assert within.as_dict()["run_error_text"].endswith("within noise")
    assert row("a", 1.0).run_error_text is None


def test_a_kind_can_predict_with_its_own_predictor_or_as_a_gpu_the_cross_model_places(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator_db.db import queries
    from operator_db.db.store import Store
    from operator_db.predict import mix

    with Store.open(db_url) as store, store.transaction() as session:
        cpu = queries.get_or_create_device_kind(session, "cpu:test", "cpu")
        gpu = queries.get_or_create_device_kind(session, "Tesla T4", "gpu")
        assert not mix.can_predict(session, cpu.name)
        assert not mix.can_predict(session, gpu.name)  # no cross-device model stored
        monkeypatch.setattr(queries, "latest_cross_predictor", lambda s, with_model: object())
        assert mix.can_predict(session, gpu.name)  # a GPU with a spec sheet
        assert not mix.can_predict(session, cpu.name)  # not a GPU it can place
        monkeypatch.setattr(queries, "has_predictor", lambda s, kind_id: kind_id == cpu.id)
        assert mix.can_predict(session, cpu.name)  # its own predictor
