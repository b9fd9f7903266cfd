"""Quality flags of a stored result: a closed vocabulary (docs/measurement.md lists them).

A flag names a condition; the details (an exception's message, which configurations were left
out) go into the result's provenance under the flag's name, never into the flags themselves.
"""

from __future__ import annotations

from enum import StrEnum


class Flag(StrEnum):
    """One quality flag of a measurement or full-model run."""

    UNSTABLE = "unstable"
    """Timing IQR / median above ``unstable_iqr_ratio`` (0.25): the time is not to be trusted."""
    NOISY = "noisy"
    """Timing IQR / median above ``noisy_iqr_ratio`` (0.10)."""
    GRAPH_UNAVAILABLE = "graph_unavailable"
    """A fast GPU op could not be captured as a CUDA graph; only eager time is stored (why:
    provenance ``graph_unavailable``)."""
    THROTTLED = "throttled"
    """An energy trial saw HW slowdown, SW/HW thermal slowdown or power brake."""
    POWER_CAPPED = "power_capped"
    """An energy trial ran at the SW power cap (normal under load; noted)."""
    ENERGY_DISAGREEMENT = "energy_disagreement"
    """Counter and integrated power differ by more than ``disagreement_limit`` on a window ≥ 1 s."""
    ENERGY_NOISY = "energy_noisy"
    """Per-call energy IQR / median over trials above ``noisy_iqr_ratio``."""
    WINDOW_TIME_DIFFERS = "window_time_differs"
    """The per-call time inside the energy windows differs from the eager median by more than
    ``window_time_tolerance`` (3 %): the device was in another regime (clocks, heat) while its
    energy was read (both figures: provenance ``window_time_differs``)."""
    HOST_NOISY = "host_noisy"
    """The host was noisy while the job ran: CPU steal, other processes' load, a clock drop,
    thermal throttling, or on a GPU its clocks, heat or other processes (which and how much:
    provenance ``host_noise``; ``devices/noise.py``)."""
    LOOSE = "loose"
    """Measured until tight, the time budget ran out first: the interval's half-width is still
    above ``tight_ratio`` of the median (how far: provenance ``until_tight``)."""
    INTERLEAVED = "interleaved"
    """Timed in rounds interleaved with the other targets of one model job."""
    INTERLEAVED_PARTIAL = "interleaved_partial"
    """A model's interleaved run left out configurations that could not be rebuilt (which and
    why: provenance ``left_out``)."""
    HOLLOW_UNAVAILABLE = "hollow_unavailable"
    """A model run without a hollow run, so no time between operators (why: provenance
    ``hollow_unavailable``)."""


MEANING: dict[Flag, str] = {
    Flag.UNSTABLE: "the time's spread (IQR) is over 25 % of its median: do not trust the time",
    Flag.NOISY: "the time's spread (IQR) is over 10 % of its median",
    Flag.GRAPH_UNAVAILABLE: "no CUDA graph could be captured: only the eager time is stored",
    Flag.THROTTLED: "the GPU slowed down (heat, power brake) during an energy trial",
    Flag.POWER_CAPPED: "an energy trial ran at the power cap (normal under load)",
    Flag.ENERGY_DISAGREEMENT: "the energy counter and the integrated power disagree",
    Flag.ENERGY_NOISY: "the energy per call varies by over 10 % between trials",
    Flag.WINDOW_TIME_DIFFERS: "the time inside the energy windows differs by over 3 % from the "
    "timing (another clock or heat regime)",
    Flag.HOST_NOISY: "the host was busy while it ran (CPU steal, other load, clock drops)",
    Flag.LOOSE: "the time budget ran out before the interval was within 1 % of the median",
    Flag.INTERLEAVED: "timed in rounds interleaved with the model's other targets (no problem)",
    Flag.INTERLEAVED_PARTIAL: "the model's interleaved run left some configurations out",
    Flag.HOLLOW_UNAVAILABLE: "no hollow run: the time between operators is unknown",
}
"""Each flag in a sentence, for a reader (the pages' legend; docs/measurement.md has more)."""

TIME_DOUBTS: frozenset[Flag] = frozenset(
    {Flag.UNSTABLE, Flag.NOISY, Flag.LOOSE, Flag.HOST_NOISY, Flag.THROTTLED}
)
"""The flags that put a result's time in doubt (an estimate's share of time from them)."""
