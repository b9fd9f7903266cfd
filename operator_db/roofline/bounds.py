"""The roofline bound, one formula for every caller, and the roof it is drawn from.

The roofline bound of a configuration is max(FLOPs / peak FLOP/s, bytes / peak bandwidth)
(METHODOLOGY §5): no implementation can beat it. :func:`roofline_time_s` is that formula and
:class:`Peaks` the roof it is drawn from; composition, significance ranking, the model's table
and plot (:mod:`.model`), the chips' plot and the predictors all use them. Arithmetic intensity
is FLOPs / compulsory bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

BoundType = Literal["memory", "compute"]


TRAFFIC_PER_BYTE_HELD = 2
"""Bytes of traffic a cache level can serve per byte it holds: each line read and written."""


def _check_work(flops: float, nbytes: float) -> None:
    if flops < 0 or nbytes < 0 or math.isnan(flops) or math.isnan(nbytes):
        raise ValueError(f"flops and bytes must be >= 0, got {flops!r} and {nbytes!r}")


def _check_peaks(peak_flops_per_s: float, peak_bytes_per_s: float) -> None:
    if not (peak_flops_per_s > 0 and peak_bytes_per_s > 0):
        raise ValueError(
            f"peaks must be > 0, got {peak_flops_per_s!r} FLOP/s and {peak_bytes_per_s!r} B/s"
        )


def _times_s(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> tuple[float, float]:
    """Return (compute time, memory time) in s at the peaks, after checking the arguments."""
    _check_work(flops, nbytes)
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return flops / peak_flops_per_s, nbytes / peak_bytes_per_s


def roofline_time_s(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> float:
    """Return the roofline lower bound on run time, s: max(flops / peak FLOP/s, bytes / peak B/s).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    return max(_times_s(flops, nbytes, peak_flops_per_s, peak_bytes_per_s))


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """Return FLOPs per byte moved: ``inf`` when no bytes move but FLOPs run, 0 when neither.

    Raises:
        ValueError: negative work.
    """
    _check_work(flops, nbytes)
    if nbytes == 0:
        return math.inf if flops > 0 else 0.0
    return flops / nbytes


def ridge_point(peak_flops_per_s: float, peak_bytes_per_s: float) -> float:
    """Return the ridge point, FLOP/byte: the intensity above which an op is compute-bound.

    Raises:
        ValueError: non-positive peaks.
    """
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return peak_flops_per_s / peak_bytes_per_s


def bound_type(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> BoundType:
    """Return ``"compute"`` when the FLOP time exceeds the byte time, else ``"memory"`` (ties too).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    compute_s, memory_s = _times_s(flops, nbytes, peak_flops_per_s, peak_bytes_per_s)
    return "compute" if compute_s > memory_s else "memory"


@dataclass(frozen=True)
class CacheRoof:
    """A cache level's roof: the bandwidth of a copy that fits in it, and what it holds."""

    level: str
    """``L2``, ``L3``, ...: as the CPU's cache hierarchy names it."""
    capacity_bytes: float
    """What the level holds for the cores measured, bytes (every instance those cores use)."""
    bytes_per_s: float
    """The level's rate, bytes/s: a copy's with its buffers in the level (measured), or the
    fastest a configuration that fits in it reached (attained, :mod:`.attained`)."""
    source: str = "measured copy"
    """How the rate was found, for display: ``measured copy``, or an attained roof's derivation."""


@dataclass(frozen=True)
class Peaks:
    """The roof of a device for one dtype: its compute peak and its memory bandwidth.

    ``caches`` (a CPU's measured cache levels, a GPU's attained L2) make the memory roof
    hierarchical: the bytes a configuration moves are served by the fastest levels first, each up
    to what it holds, and only the rest at ``bytes_per_s`` (:meth:`memory_time_s`). Without them
    it is the plain roofline, bytes / bandwidth.
    """

    flops_per_s: float
    """Peak FLOP/s (int8: OP/s) for the dtype."""
    bytes_per_s: float
    """Peak memory (DRAM, HBM) bandwidth, bytes/s."""
    source: str = "spec"
    """Where the two figures come from (spec sheet, measured, or a mix), for display."""
    caches: tuple[CacheRoof, ...] = ()
    """Cache levels faster than memory, each a roof of its own (a CPU's measured ones; a GPU's
    L2 attained by its configurations)."""

    def memory_time_s(self, nbytes: float | None) -> float:
        """Return the least time to move ``nbytes`` bytes, s (None: 0).

        The fastest cache level serves up to ``TRAFFIC_PER_BYTE_HELD`` times as many bytes as it
        holds, then the next, and memory the rest: a floor however the bytes are spread over the
        levels, since no byte comes faster than the fastest level that can hold it, and a line
        held is at most read and written back (an in-place ``add_`` of two 1.6 MB tensors moves
        4.8 MB over 3.2 MB of lines). Levels no faster than memory are left out.

        Raises:
            ValueError: negative bytes or non-positive peaks.
        """
        left = nbytes or 0.0
        _check_work(0.0, left)
        _check_peaks(self.flops_per_s, self.bytes_per_s)
        time_s = 0.0
        for cache in sorted(self.caches, key=lambda c: -c.bytes_per_s):
            if cache.bytes_per_s <= self.bytes_per_s or left <= 0:
                continue
            served = min(left, TRAFFIC_PER_BYTE_HELD * cache.capacity_bytes)
            time_s += served / cache.bytes_per_s
            left -= served
        return time_s + left / self.bytes_per_s

    def bound_s(self, flops: float | None, nbytes: float | None) -> float:
        """Return the roofline bound of ``flops`` FLOPs moving ``nbytes`` bytes, in s (None: 0).

        max(FLOPs / peak, :meth:`memory_time_s`): with no cache levels, :func:`roofline_time_s`.

        Raises:
            ValueError: negative work or non-positive peaks.
        """
        if not self.caches:
            return roofline_time_s(flops or 0, nbytes or 0, self.flops_per_s, self.bytes_per_s)
        _check_work(flops or 0, nbytes or 0)
        return max((flops or 0) / self.flops_per_s, self.memory_time_s(nbytes))

    def bound_type(self, flops: float | None, nbytes: float | None) -> BoundType:
        """Return which roof limits the work: ``compute`` or ``memory`` (ties too; None: 0)."""
        if not self.caches:
            return bound_type(flops or 0, nbytes or 0, self.flops_per_s, self.bytes_per_s)
        compute_s = (flops or 0) / self.flops_per_s
        return "compute" if compute_s > self.memory_time_s(nbytes) else "memory"

    def attainable_flops_per_s(self, intensity: float) -> float:
        """Return the memory roof at ``intensity`` FLOP/byte: min(peak FLOP/s, intensity × BW)."""
        return min(self.flops_per_s, intensity * self.bytes_per_s)

    def as_dict(self) -> dict[str, Any]:
        """Return the roof as plain values (JSON): FLOP/s, bytes/s, source, cache levels."""
        return {
            "flops_per_s": self.flops_per_s,
            "bytes_per_s": self.bytes_per_s,
            "source": self.source,
            "caches": [vars(c) for c in self.caches],
        }
