"""Statistics of raw samples, and figures that carry their noise.

- :func:`summarize`: median, mean within 3σ, IQR, CV of one series (derived, never stored alone).
- :class:`Interval`: a figure with its confidence interval, the level it holds and how it was
  made, as torch.utils.benchmark's ``Measurement`` carries its own statistics.
- :func:`median_interval`: the exact distribution-free interval of a median from its samples
  (order statistics: no assumption of normality, no resampling, the same answer every time).
- :func:`sum_interval`, :func:`error_interval`: an estimate Σ c·x and its error against a
  measured figure, each with an interval combined from its parts' (see their docstrings for the
  rules and their assumptions; docs/measurement.md, "Intervals").

Pure Python: every layer may use it (docs/architecture.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.95
"""The confidence level figures are given at unless asked otherwise."""


@dataclass(frozen=True)
class Summary:
    """Statistics of one series, in the series' unit (CV is unitless)."""

    n: int
    median: float
    mean: float
    """Mean of the samples within 3 standard deviations of the mean of all samples."""
    iqr: float
    cv: float
    """Standard deviation / mean of all samples (0 for a single sample)."""
    minimum: float
    maximum: float

    @property
    def iqr_ratio(self) -> float:
        """IQR / median (torch.utils.benchmark's noise measure)."""
        return self.iqr / self.median if self.median else math.inf


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Return the q-quantile (0..1) of sorted values, interpolating linearly between ranks."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> Summary:
    """Summarise samples.

    Raises:
        ValueError: no samples.
    """
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    mean_all = statistics.fmean(ordered)
    std = statistics.pstdev(ordered) if len(ordered) > 1 else 0.0
    kept = [v for v in ordered if abs(v - mean_all) <= 3 * std] or ordered
    return Summary(
        n=len(ordered),
        median=quantile(ordered, 0.5),
        mean=statistics.fmean(kept),
        iqr=quantile(ordered, 0.75) - quantile(ordered, 0.25),
        cv=std / mean_all if mean_all else 0.0,
        minimum=ordered[0],
        maximum=ordered[-1],
    )


@dataclass(frozen=True)
class Interval:
    """A figure with its confidence interval, in the figure's unit.

    ``level`` is the coverage the interval holds (an exact method's achieved level, which may
    exceed the one asked for, or fall short where there are too few samples to reach it);
    ``method`` says how it was made; ``n`` the samples it rests on (None: combined).
    """

    value: float
    low: float
    high: float
    level: float
    method: str
    n: int | None = None

    @property
    def below(self) -> float:
        """``value - low`` (≥ 0), in the figure's unit."""
        return max(self.value - self.low, 0.0)

    @property
    def above(self) -> float:
        """``high - value`` (≥ 0), in the figure's unit."""
        return max(self.high - self.value, 0.0)

    @property
    def half_width_ratio(self) -> float:
        """The larger side of the interval over |value| (inf for a zero value)."""
        if self.value == 0:
            return 0.0 if self.below == self.above == 0 else math.inf
        return max(self.below, self.above) / abs(self.value)

    def holds(self, x: float) -> bool:
        """Whether ``x`` lies in the interval (ends included)."""
        return self.low <= x <= self.high

    def scaled(self, factor: float) -> Interval:
        """Return the interval of ``factor`` × the figure (``factor`` ≥ 0)."""
        return Interval(
            self.value * factor,
            self.low * factor,
            self.high * factor,
            self.level,
            self.method,
            self.n,
        )

    def sigmas(self) -> tuple[float, float]:
        """Return the standard errors below and above the value (half-widths / z of ``level``)."""
        z = _z(self.level)
        if z == 0:
            return (math.inf, math.inf)
        return self.below / z, self.above / z

    def as_dict(self) -> dict[str, Any]:
        """Return the interval as JSON-ready data."""
        return asdict(self)


def exact(value: float, method: str = "exact") -> Interval:
    """Return a figure without noise (a count, a figure taken as given): a zero-width interval."""
    return Interval(value, value, value, 1.0, method)


def _z(level: float) -> float:
    """Return the two-sided standard-normal quantile of ``level`` (inf at 1, 0 at 0)."""
    if level >= 1.0:
        return math.inf
    if level <= 0.0:
        return 0.0
    return statistics.NormalDist().inv_cdf((1 + level) / 2)


def _binomial_mass(i: int, n: int) -> float:
    """Return P(B = i) for B ~ Binomial(n, 1/2) (through log-gamma: any n)."""
    return math.exp(
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
    )


def median_interval(samples: Sequence[float], level: float = LEVEL) -> Interval:
    """Return the median of ``samples`` with its exact distribution-free confidence interval.

    The interval is [x₍ₖ₎, x₍ₙ₋ₖ₊₁₎] of the sorted samples for the largest k whose coverage
    1 − 2·P(B ≤ k − 1), B ~ Binomial(n, ½), is at least ``level`` (the order-statistic interval
    of a median: it assumes only independent samples of one distribution). With too few samples to
    reach ``level`` (fewer than 6 at 95 %), it is [min, max] and ``level`` says what it holds.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    n = len(ordered)
    median = quantile(ordered, 0.5)
    tail = _binomial_mass(0, n)  # P(B ≤ k − 1) for the current k
    k, held = 1, 1 - 2 * tail
    while k + 1 <= (n + 1) // 2:
        tail += _binomial_mass(k, n)
        coverage = 1 - 2 * tail
        if coverage < level:
            break
        k, held = k + 1, coverage
    return Interval(
        median,
        min(ordered[k - 1], median),
        max(ordered[n - k], median),
        held if n > 1 else 0.0,
        "median, order statistics (exact)",
        n,
    )


def sum_interval(
    terms: Iterable[Interval], level: float = LEVEL, *, correlated: bool = False
) -> Interval:
    """Return the interval of the sum of ``terms`` at ``level``.

    Each term's sides become standard errors (its half-widths / z of its level) and the sides are
    summed separately, in quadrature (``correlated=False``: the terms' noise independent of one
    another) or linearly (``correlated=True``: the same error moves them all, as a predictor's
    bias does). A term without noise (zero width) adds its value only; an infinite side stays
    infinite.
    """
    items = list(terms)
    value = sum(t.value for t in items)
    z = _z(level)
    below: list[float] = []
    above: list[float] = []
    for t in items:
        lo, hi = t.sigmas()
        below.append(lo)
        above.append(hi)
    if correlated:
        lo_s, hi_s = sum(below), sum(above)
    else:
        lo_s = math.sqrt(sum(b * b for b in below))
        hi_s = math.sqrt(sum(a * a for a in above))
    rule = "linear" if correlated else "quadrature"
    return Interval(value, value - z * lo_s, value + z * hi_s, level, f"sum ({rule})")


def error_interval(estimate: Interval, measured: Interval, level: float = LEVEL) -> Interval:
    """Return (estimate − measured) / measured with its interval at ``level``.

    The two figures are taken as independent and their noise as relative (on a log scale):
    ln(estimate / measured) moves by √(σ_e² + σ_m²), each side with its own σ — the estimate's
    low side with the measured figure's high side and the other way round. The interval holds 0
    where the difference is within the noise of both.

    Raises:
        ValueError: a figure ≤ 0.
    """
    if estimate.value <= 0 or measured.value <= 0:
        raise ValueError("an error needs two positive figures")
    e_lo, e_hi = (s / estimate.value for s in estimate.sigmas())
    m_lo, m_hi = (s / measured.value for s in measured.sigmas())
    z = _z(level)
    centre = math.log(estimate.value / measured.value)
    low = centre - z * math.hypot(_ln_side(e_lo, below=True), _ln_side(m_hi, below=False))
    high = centre + z * math.hypot(_ln_side(e_hi, below=False), _ln_side(m_lo, below=True))
    return Interval(
        math.exp(centre) - 1,
        math.exp(low) - 1,
        math.exp(high) - 1,
        level,
        "ratio, log scale (quadrature)",
    )


def _ln_side(relative: float, *, below: bool) -> float:
    """Return a relative standard error as a distance on the log scale (inf at 0 or below)."""
    if not math.isfinite(relative):
        return math.inf
    if below:
        return -math.log(1 - relative) if relative < 1 else math.inf
    return math.log1p(relative)


def within_noise(interval: Interval, reference: float = 0.0) -> bool:
    """Whether ``reference`` lies in the interval: the difference is within the noise."""
    return interval.holds(reference)


def noise_verdict(interval: Interval, reference: float = 0.0) -> str:
    """Return ``within noise`` where the interval holds ``reference``, else ``beyond noise``."""
    return "within noise" if within_noise(interval, reference) else "beyond noise"


def describe_error(interval: Interval) -> str:
    """Return e.g. ``−9.5 % (−14.0 … −5.0 %, 95 %), beyond noise`` for an error's interval."""
    return f"{format_percent(interval)}, {noise_verdict(interval)}"


def format_ms(seconds: float | None, dash: str = "–") -> str:
    """Write a time in seconds as milliseconds without an exponent: ``76.5``, ``1,234``.

    Three significant digits below 100 ms, whole milliseconds with thousands separators above;
    ``dash`` where there is no figure. The CLI and the pages write times with this one function.
    """
    if seconds is None or not math.isfinite(seconds):
        return dash
    milli = seconds * 1e3
    if milli == 0:
        return "0"
    if abs(milli) >= 100:
        return f"{milli:,.0f}"
    digits = 2 - math.floor(math.log10(abs(milli)))  # three significant digits
    return f"{milli:.{digits}f}"


def format_percent(interval: Interval) -> str:
    """Return e.g. ``−9.5 % (−14.0 … −5.0 %, 95 %)`` for an interval of a ratio."""

    def pct(x: float) -> str:
        return "∞" if not math.isfinite(x) else f"{x * 100:+.1f}".replace("-", "−")

    return (
        f"{pct(interval.value)} % ({pct(interval.low)} … {pct(interval.high)} %, "
        f"{interval.level * 100:.0f} %)"
    )
