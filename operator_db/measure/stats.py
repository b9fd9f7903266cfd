"""Statistics of raw samples: median, mean within 3σ, IQR, CV (all derived, never stored alone)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


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
