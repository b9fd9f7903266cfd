"""Which roof explains a measured point: DRAM, a cache level, compute, an algorithm, or none.

A roof is a bound no run can beat; a point drawn above it says the roof is wrong or the work is
miscounted. Each measured configuration (FLOPs, compulsory bytes, per-call time) is put in one
class against a kind's roof (:class:`~operator_db.roofline.bounds.Peaks`):

- ``memory``: at or below the plain roof (DRAM bandwidth and compute peak), memory-bound by it;
- ``compute``: at or below the plain roof, compute-bound by it;
- ``cache``: above the plain roof but at or below the hierarchical one, whose cache levels (a
  CPU's measured L2 and L3, a GPU's attained L2) serve its bytes first: the cache explains it;
- ``algorithm``: above every roof, but its result names a Winograd or FFT kernel (an imported
  result's provenance) and it is no further above the compute roof than that algorithm's FLOP
  reduction allows (:func:`kernel_algorithm`): it ran fewer operations than the direct
  convolution's FLOPs that are counted (docs/peaks.md);
- ``unexplained``: above every roof, with no such kernel named (operator-db's own results record
  no kernel names), or further above than the named algorithm allows (:func:`explain_above`
  says why).

:func:`roof_class` decides the first four and ``unexplained`` from the work and the time alone;
:func:`explain_above` takes an unexplained point's kernel names to the ``algorithm`` class.
Plots mark the last three (:func:`~operator_db.roofline.figure.mark_classes`) and tables count
all five (:class:`RoofCounts`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from operator_db.roofline.bounds import Peaks

RoofClass = Literal["memory", "cache", "compute", "algorithm", "unexplained"]
ROOF_CLASSES: tuple[RoofClass, ...] = ("memory", "cache", "compute", "algorithm", "unexplained")

TOLERANCE = 1e-9
"""Relative slack below a bound still counted at it: the point that sets an attained roof sits
exactly on it, give or take rounding."""

FILTER = 3
"""The filter side the reductions are reckoned for: 3×3, the convolutions cuDNN runs as Winograd
(and the smallest an FFT kernel runs on the data set); a larger filter only allows more."""


def plain(peaks: Peaks) -> Peaks:
    """Return the roof without its cache levels: compute peak and DRAM bandwidth only."""
    return replace(peaks, caches=()) if peaks.caches else peaks


def cache_levels(peaks: Peaks | None) -> str:
    """Return the roof's cache levels as one name (``L2``, ``L2/L3``), or ``cache``."""
    levels = [c.level for c in peaks.caches] if peaks is not None else []
    return "/".join(levels) or "cache"


def class_labels(peaks: Peaks | None) -> dict[RoofClass, str]:
    """Return what each class is called for a roof: ``DRAM-bound``, ``L2-explained``, ..."""
    return {
        "memory": "DRAM-bound",
        "cache": f"{cache_levels(peaks)}-explained",
        "compute": "compute-bound",
        "algorithm": "algorithm-explained",
        "unexplained": "unexplained",
    }


def times(ratio: float) -> str:
    """Return a ratio as people read it: ``2.25×``; ``1.0007×`` just above 1, not ``1.00×``."""
    return f"{ratio:.4f}×" if 1 < ratio < 1.005 else f"{ratio:.2f}×"


def above(flops: float, nbytes: float, time_s: float, peaks: Peaks) -> float:
    """Return bound / time: how far the point is above its roof (> 1: above; NaN: no time)."""
    if not time_s > 0:
        return math.nan
    return peaks.bound_s(flops, nbytes) / time_s


def roof_class(flops: float, nbytes: float, time_s: float, peaks: Peaks) -> RoofClass | None:
    """Return which roof explains a point measured at ``time_s`` per call; None without a time.

    Never ``algorithm``: that needs the kernels that ran (:func:`explain_above`).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    if not time_s > 0:
        return None
    flat = plain(peaks)
    if time_s >= flat.bound_s(flops, nbytes) * (1 - TOLERANCE):
        return "compute" if flat.bound_type(flops, nbytes) == "compute" else "memory"
    if peaks.caches and time_s >= peaks.bound_s(flops, nbytes) * (1 - TOLERANCE):
        return "cache"
    return "unexplained"


@dataclass(frozen=True)
class Algorithm:
    """A convolution algorithm that runs fewer FLOPs than the direct convolution counted."""

    name: str
    """``Winograd F(4×4, 3×3)``, ``FFT, 32×32 transforms``."""
    reduction: float
    """The most it divides the direct convolution's FLOPs by (its transforms cost some back)."""


def winograd_reduction(tile: int, r: int = FILTER) -> float:
    """Return F(m×m, r×r)'s reduction: (m·r)² multiplications per tile against (m + r − 1)²."""
    return (tile * r / (tile + r - 1)) ** 2


def fft_reduction(size: int, r: int = FILTER) -> float:
    """Return an FFT convolution's reduction on ``size`` × ``size`` transforms of an r×r filter.

    Per input and output channel the direct convolution costs 2·r² FLOPs for each of the
    (size − r + 1)² outputs a transform yields; the FFT one a complex multiply-add (8 FLOPs)
    per frequency of the real transform, size × (size / 2 + 1): r²(size − r + 1)² /
    (2·size·(size + 2)), 3.72 at 32 × 32 and 3.06 at 16 × 16 for 3×3, at most r² / 2.
    """
    return r * r * (size - r + 1) ** 2 / (2 * size * (size + 2))


_WINOGRAD = re.compile(r"winograd[a-z]*?(\d+)x(\d+)")
"""A Winograd kernel naming its output tile (cuDNN's ``winogradforwarddata4x4``), not its
thread block (``scudnn_winograd_128x128``, where ``_`` follows the word)."""
_FFT = re.compile(r"fft\w*?_(\d+)x(\d+)")
"""An FFT kernel naming its transform's size (cuDNN's ``fft2d_r2c_32x32``)."""


def kernel_algorithm(kernels: Iterable[str]) -> Algorithm | None:
    """Return the algorithm the kernel names say ran, with the most FLOP reduction; None: none.

    A Winograd kernel naming its output tile m gives F(m×m, 3×3); one that does not (cuDNN's
    fused ``scudnn_winograd`` kernels name their thread block) F(2×2, 3×3)'s 2.25×, the least of
    any tile. An FFT kernel naming its size gives :func:`fft_reduction` of it; one that does not
    the limit r² / 2 (4.5×).
    """
    found: list[Algorithm] = []
    for kernel in (k.lower() for k in kernels):
        if "winograd" in kernel:
            tile = _WINOGRAD.search(kernel)
            m = int(tile.group(1)) if tile and tile.group(1) == tile.group(2) else 0
            if 2 <= m <= 8:
                found.append(Algorithm(f"Winograd F({m}×{m}, 3×3)", winograd_reduction(m)))
            else:
                found.append(Algorithm("Winograd (tile not named: F(2×2, 3×3))", 2.25))
        if "fft" in kernel:
            size = _FFT.search(kernel)
            n = int(size.group(1)) if size and size.group(1) == size.group(2) else 0
            if n > FILTER:
                found.append(Algorithm(f"FFT, {n}×{n} transforms", fft_reduction(n)))
            else:
                found.append(Algorithm("FFT (size not named)", FILTER * FILTER / 2))
    return max(found, key=lambda a: a.reduction, default=None)


NO_KERNEL = "no kernel recorded"
"""Why a point above every roof without kernel names stays unexplained (operator-db's own
results, a data set's result without them)."""


def explain_above(
    flops: float, nbytes: float, time_s: float, peaks: Peaks, kernels: Sequence[str] | None
) -> tuple[RoofClass, str]:
    """Return the class of a point above every roof, given the kernels its result names, and why.

    ``algorithm`` (with the algorithm and its reduction) where a Winograd or FFT kernel is named
    and the point, its FLOPs divided by that algorithm's reduction, is no longer above the roof;
    else ``unexplained`` with the reason: no kernel named, no such kernel among them, or further
    above the compute roof than the algorithm allows.
    """
    if not kernels:
        return "unexplained", NO_KERNEL
    algorithm = kernel_algorithm(kernels)
    if algorithm is None:
        return "unexplained", f"no Winograd or FFT kernel ({kernels[0][:60]})"
    over = flops / (peaks.flops_per_s * time_s) if time_s > 0 else math.nan
    if roof_class(flops / algorithm.reduction, nbytes, time_s, peaks) == "unexplained":
        if over > algorithm.reduction * (1 - TOLERANCE):
            return "unexplained", (
                f"{over:.2f}× the compute roof: more than {algorithm.name} allows "
                f"({algorithm.reduction:.3g}×)"
            )
        return "unexplained", f"{algorithm.name}, but above the memory roof too"
    return "algorithm", f"{algorithm.name}: up to {algorithm.reduction:.3g}× fewer FLOPs"


@dataclass(frozen=True)
class RoofCounts:
    """How many points each roof explains, and how far the points above every roof are above."""

    memory: int = 0
    cache: int = 0
    compute: int = 0
    algorithm: int = 0
    unexplained: int = 0
    most_above: float | None = None
    """The largest bound / time of an unexplained point (None: none)."""
    algorithm_most: float | None = None
    """The largest bound / time of an algorithm-explained point (None: none)."""

    @property
    def total(self) -> int:
        """Every point with a time."""
        return sum(self.of(c) for c in ROOF_CLASSES)

    def of(self, cls: RoofClass) -> int:
        """Return the count of one class."""
        return int(getattr(self, cls))

    def describe(self, peaks: Peaks | None = None) -> str:
        """Return ``3601 DRAM-bound, 7 L2-explained, ..., 0 unexplained``.

        Every class, in :data:`ROOF_CLASSES`' order; the last two with how far above they are,
        where they have points.
        """
        labels = class_labels(peaks)
        parts = [f"{self.of(c)} {labels[c]}" for c in ROOF_CLASSES]
        if self.algorithm_most is not None:
            parts[-2] += f" (Winograd/FFT kernels, up to {times(self.algorithm_most)})"
        if self.most_above is not None:
            parts[-1] += f" (up to {times(self.most_above)} above every roof)"
        return ", ".join(parts)


def count_classes(
    classes: Iterable[RoofClass | None | float], aboves: Iterable[float | None] | None = None
) -> RoofCounts:
    """Count the classes (None: no time, left out).

    ``aboves`` (bound / time, in the same order) gives the most an unexplained point, and an
    algorithm-explained one, is above.
    """
    found = {c: 0 for c in ROOF_CLASSES}
    most: dict[str, float] = {}
    ratios = iter(aboves) if aboves is not None else None
    for cls in classes:
        ratio = next(ratios) if ratios is not None else math.nan
        if cls not in found:  # None (or a table's NaN): no time
            continue
        found[cls] += 1
        if cls in ("algorithm", "unexplained") and isinstance(ratio, int | float):
            value = float(ratio)
            if not math.isnan(value):
                most[cls] = max(most.get(cls, value), value)
    return RoofCounts(
        **found, most_above=most.get("unexplained"), algorithm_most=most.get("algorithm")
    )
