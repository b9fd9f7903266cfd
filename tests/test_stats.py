"""Known answers of the interval arithmetic (operator_db/stats.py)."""

from __future__ import annotations

import math
import random

import pytest

from operator_db.stats import (
    Interval,
    describe_error,
    error_interval,
    exact,
    format_percent,
    median_interval,
    noise_verdict,
    sum_interval,
    within_noise,
)


def test_median_interval_of_twenty_is_the_6th_to_15th() -> None:
    iv = median_interval([float(x) for x in range(20, 0, -1)])
    assert (iv.value, iv.low, iv.high, iv.n) == (10.5, 6.0, 15.0, 20)
    # 1 − 2·P(B ≤ 5), B ~ Binomial(20, ½) = 1 − 2 · 21700 / 2²⁰
    assert iv.level == pytest.approx(1 - 2 * 21700 / 2**20)


def test_too_few_samples_give_min_max_and_say_the_level_held() -> None:
    iv = median_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (iv.low, iv.high) == (1.0, 5.0)
    assert iv.level == pytest.approx(1 - 2 / 32)  # below 95 %: said, not hidden
    one = median_interval([2.0])
    assert one.level == 0.0 and one.sigmas() == (math.inf, math.inf)
    with pytest.raises(ValueError):
        median_interval([])


def test_median_interval_covers_the_true_median_at_its_level() -> None:
    rng = random.Random(7)
    held = sum(
        median_interval([rng.lognormvariate(0, 0.3) for _ in range(20)]).holds(1.0)
        for _ in range(3000)
    )
    assert 0.94 <= held / 3000 <= 0.975  # exact: 95.9 % for a continuous distribution


def test_a_large_series_is_fast_and_tight() -> None:
    iv = median_interval([float(x) for x in range(1, 10_001)])
    assert iv.level >= 0.95 and iv.high - iv.low < 220  # ± 1.96 · √n / 2 ranks


def test_sum_in_quadrature_and_linearly() -> None:
    z = 1.959963984540054
    a = Interval(10.0, 10.0 - 3 * z, 10.0 + 3 * z, 0.95, "t")
    b = Interval(20.0, 20.0 - 4 * z, 20.0 + 4 * z, 0.95, "t")
    q = sum_interval([a, b])
    assert q.value == 30.0 and (q.low, q.high) == pytest.approx((30 - 5 * z, 30 + 5 * z))
    lin = sum_interval([a, b], correlated=True)
    assert (lin.low, lin.high) == pytest.approx((30 - 7 * z, 30 + 7 * z))
    fixed = sum_interval([a, exact(5.0)])  # a figure taken as given adds its value only
    assert (fixed.low, fixed.high) == pytest.approx((15 - 3 * z, 15 + 3 * z))


def test_error_interval_combines_both_sides() -> None:
    z = 1.959963984540054
    r = 0.001
    est = Interval(1.1, 1.1 * (1 - r * z), 1.1 * (1 + r * z), 0.95, "t")
    run = Interval(1.0, 1 - r * z, 1 + r * z, 0.95, "t")
    e = error_interval(est, run)
    assert e.value == pytest.approx(0.1)
    half = 1.1 * z * r * math.sqrt(2)  # small noise: relative errors add in quadrature
    assert (e.low, e.high) == pytest.approx((0.1 - half, 0.1 + half), rel=1e-3)
    assert not within_noise(e)
    assert error_interval(exact(1.1), exact(1.0)).low == pytest.approx(0.1)
    noisy = error_interval(Interval(1.02, 0.9, 1.1, 0.95, "t"), run)
    assert within_noise(noisy)
    with pytest.raises(ValueError):
        error_interval(exact(0.0), run)


def test_format_percent() -> None:
    iv = Interval(-0.095, -0.14, -0.05, 0.95, "t")
    assert format_percent(iv) == "−9.5 % (−14.0 … −5.0 %, 95 %)"
    assert describe_error(iv) == "−9.5 % (−14.0 … −5.0 %, 95 %), beyond noise"
    assert noise_verdict(Interval(0.01, -0.02, 0.03, 0.95, "t")) == "within noise"
