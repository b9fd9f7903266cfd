"""Composing a generation from step figures: the formulas, interpolation, intervals, bounds."""

from __future__ import annotations

import math

import pytest

from operator_db.llm.compose import (
    Between,
    Reference,
    StepFigure,
    compose_generation,
    line_weights,
    weighted,
)
from operator_db.llm.memory import fit_in_memory
from operator_db.stats import Interval, exact


def fig(value: float, half: float = 0.0) -> Interval:
    return Interval(value, value - half, value + half, 0.95, "test")


def steps(batch: int = 1) -> list[StepFigure]:
    # Decode time 1 ms + 0.01 ms per 10 cached tokens: linear in the context.
    return [
        StepFigure("prefill", batch, 100, fig(0.020, 0.0002)),
        StepFigure("prefill", batch, 200, fig(0.040, 0.0004)),
        StepFigure("decode", batch, 100, fig(0.0010, 0.00001)),
        StepFigure("decode", batch, 200, fig(0.0011, 0.00001)),
    ]


def test_line_weights() -> None:
    assert line_weights([100, 200], 100) == ({0: 1.0}, "measured")
    assert line_weights([200, 100], 125) == ({1: 0.75, 0: 0.25}, "interpolated")
    weights, how = line_weights([100, 200], 300)
    assert how == "extrapolated" and weights == pytest.approx({0: -1.0, 1: 2.0})
    assert line_weights([100], 300) == ({0: 1.0}, "flat")
    with pytest.raises(ValueError, match="no known point"):
        line_weights([], 1)


def test_weighted_sums_in_quadrature() -> None:
    total = weighted([fig(1.0, 0.3), fig(2.0, 0.4)], [1.0, 1.0])
    assert total.value == pytest.approx(3.0)
    assert total.high - total.value == pytest.approx(0.5, rel=1e-3)  # √(0.3² + 0.4²)
    back = weighted([fig(1.0, 0.3), fig(2.0, 0.4)], [-1.0, 2.0])  # an extrapolation
    assert back.value == pytest.approx(3.0)
    assert back.high - back.value == pytest.approx(math.hypot(0.3, 0.8), rel=1e-3)


def test_a_generation_is_ttft_plus_its_decode_steps_plus_generates_own_time() -> None:
    between = Between(fig(0.002), fig(0.0005), fig(0.0001), (1, 100, 11))
    e = compose_generation("m", "cpu:x", 1, 100, 11, steps(), between=between)
    assert e.ttft is not None and e.ttft.value == pytest.approx(0.022)
    # 10 decode steps over caches of 100 … 109 tokens: 1 ms + 1 µs per cached token above 100.
    assert [p.context for p in e.points] == list(range(100, 110))
    assert [p.how for p in e.points] == ["measured"] + ["interpolated"] * 9
    decode = sum(0.0010 + (c - 100) * 1e-6 for c in range(100, 110))
    assert e.points[3].time.value == pytest.approx(0.0010 + 3e-6 + 0.0005)
    assert e.total is not None
    assert e.total.value == pytest.approx(0.022 + decode + 10 * 0.0005 + 0.0001)
    assert e.tpot is not None
    assert e.tpot.value == pytest.approx((e.total.value - e.ttft.value) / 10)
    assert e.tokens_per_s == pytest.approx(11 / e.total.value)
    assert e.total.low < e.total.value < e.total.high  # the parts' noise carried over


def test_a_prompt_between_measured_ones_is_interpolated_and_said_so() -> None:
    e = compose_generation("m", "cpu:x", 1, 150, 1, steps())
    assert e.ttft is not None and e.ttft.value == pytest.approx(0.030)
    assert "the prefill of 150 tokens is interpolated from measured prompts" in e.notes
    assert any("not measured on this kind" in n for n in e.notes)  # no hollow run
    assert e.total is not None and e.total.value == pytest.approx(0.030)


def test_nothing_measured_at_the_batch_gives_no_figure_and_says_why() -> None:
    e = compose_generation("m", "cpu:x", 8, 100, 4, steps(batch=1))
    assert e.ttft is None and e.total is None and e.tpot is None
    assert "no prefill measured at batch 8: no TTFT" in e.notes
    assert "no decode step measured at batch 8: no TPOT" in e.notes


def test_errors_against_the_measured_runs_carry_both_intervals() -> None:
    reference = Reference(fig(0.0215, 0.0005), fig(0.0016, 0.0001), fig(0.038, 0.001), None, 9)
    between = Between(exact(0.002), exact(0.0005), exact(0.0), (1, 100, 11))
    e = compose_generation("m", "cpu:x", 1, 100, 11, steps(), between=between, reference=reference)
    errors = e.errors()
    assert set(errors) == {"ttft", "tpot", "total"}
    assert errors["ttft"].value == pytest.approx(0.022 / 0.0215 - 1)
    assert errors["ttft"].low < errors["ttft"].value < errors["ttft"].high
    data = e.as_dict()
    assert data["errors"]["ttft"]["verdict"] in ("within noise", "beyond noise")
    assert data["measured"]["runs"] == 9


def test_decode_roofline_and_memory_fit() -> None:
    e = compose_generation(
        "m", "gpu", 2, 100, 3, steps(batch=2),
        weight_bytes=1000, kv_bytes_per_token=10, bandwidth_bytes_per_s=1e6,
        memory_bytes=101_000, max_context=4096,
    )  # fmt: skip
    # Steps over caches of 100 and 101: (1000 + 2 × (c + 1) × 10) / 1e6 s.
    assert e.bound_tpot_s == pytest.approx(((1000 + 2020) + (1000 + 2040)) / 2 / 1e6)
    assert e.bound_share == pytest.approx(e.bound_tpot_s / e.tpot.value)  # type: ignore[union-attr]
    assert e.fit is not None and e.fit.tokens == 10_000
    assert e.fit.max_context == 4096 and e.fit.max_batch == 10_000 // 103
    assert fit_in_memory(500, 1000, 10, 1, 10, None).tokens == 0  # the weights do not fit


def test_energy_per_token_where_every_step_has_one() -> None:
    with_energy = [
        StepFigure(s.phase, s.batch, s.tokens, s.time, fig(s.time.value * 100)) for s in steps()
    ]
    e = compose_generation("m", "gpu", 1, 100, 11, with_energy)
    assert e.energy is not None and e.joules_per_token is not None
    decode = sum(0.1 + (c - 100) * 1e-4 for c in range(100, 110))
    assert e.energy.value == pytest.approx(2.0 + decode)
    assert e.joules_per_token.value == pytest.approx(e.energy.value / 11)
    assert compose_generation("m", "gpu", 1, 100, 11, steps()).energy is None


def test_an_energy_that_composes_to_zero_or_less_is_none_with_a_note() -> None:
    """Step energies that are noise around zero (the fake device on a loaded host: CI's dry run
    of the GPU call composed -1.1 J at batch 8) give no energy, and say so."""
    below = [StepFigure(s.phase, s.batch, s.tokens, s.time, fig(-0.01)) for s in steps()]
    e = compose_generation("m", "gpu", 1, 100, 11, below)
    assert e.energy is None and e.joules_per_token is None
    assert any(n.startswith("no energy: the forwards' energy composed to -0.") for n in e.notes)


def test_an_energy_without_an_error_against_the_runs_says_why() -> None:
    """The runs' energy read 0 J or below (noise on the fake device), or none; a step has none."""
    with_energy = [StepFigure(s.phase, s.batch, s.tokens, s.time, fig(0.1)) for s in steps()]
    for energy, said in [
        (fig(-0.2), "no energy error: the measured generate() runs' energy is -0.2 J"),
        (None, "no energy error: the measured generate() runs read no energy"),
    ]:
        reference = Reference(fig(0.02), fig(0.001), fig(0.03), energy, runs=3)
        e = compose_generation("m", "gpu", 1, 100, 11, with_energy, reference=reference)
        assert e.energy is not None and "energy" not in e.errors() and said in e.notes
    some = [with_energy[0], *steps()[1:]]
    e = compose_generation("m", "gpu", 1, 100, 11, some)
    assert e.energy is None and "no energy: 1 of 2 prefill steps have none measured" in e.notes
    none = compose_generation("m", "gpu", 1, 100, 11, steps())  # time only, as imported profiles
    assert none.energy is None and "no energy: the steps have none measured" in none.notes


def test_energy_adds_idle_power_between_forwards_and_meets_the_runs() -> None:
    with_energy = [
        StepFigure(s.phase, s.batch, s.tokens, s.time, fig(s.time.value * 100), idle_power_w=50.0)
        for s in steps()
    ]
    between = Between(fig(0.002), fig(0.0005), fig(0.001), (1, 100, 11))
    forwards = compose_generation("m", "gpu", 1, 100, 11, with_energy).energy
    assert forwards is not None  # no time between forwards measured: the forwards alone
    ref = Reference(fig(0.024), fig(0.0015), fig(0.04), fig(2.6), runs=5)
    e = compose_generation("m", "gpu", 1, 100, 11, with_energy, between=between, reference=ref)
    # 50 W × (2 ms + 10 × 0.5 ms + 1 ms) between the forwards.
    assert e.energy_between is not None and e.energy_between.value == pytest.approx(0.4)
    assert e.energy is not None and e.energy.value == pytest.approx(forwards.value + 0.4)
    assert e.joules_per_token is not None
    assert e.joules_per_token.value == pytest.approx(e.energy.value / 11)
    assert e.errors()["energy"].value == pytest.approx(e.energy.value / 2.6 - 1)
    assert e.as_dict()["measured"]["joules_per_token"] == pytest.approx(2.6 / 11)
    assert any("idle power 50 W" in n for n in e.notes)
    # A step without its idle power: the forwards' energy alone, and said so.
    unknown = [*with_energy[:3], StepFigure("decode", 1, 200, fig(0.0011), fig(0.11))]
    alone = compose_generation("m", "gpu", 1, 100, 11, unknown, between=between)
    assert alone.energy_between is None and alone.energy is not None
    assert "no idle power known: the energy is the forwards' alone" in alone.notes
