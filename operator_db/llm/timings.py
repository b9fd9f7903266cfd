"""What ``generate()`` runs measured: one run's times, a set of runs' medians (torch-free).

:mod:`operator_db.llm.runs` makes them on a device; :mod:`operator_db.llm.estimate` reads them
back from the store.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from operator_db.stats import Interval, median_interval

MIN_RUNS = 5
"""Runs at least: of a whole set, and of the runs of one phase's jobs that a figure is compared
with (:meth:`GenerationTimes.made_in`)."""


@dataclass(frozen=True)
class GenerateRun:
    """One ``generate()`` run: times in s, energy in J (None where not read)."""

    ttft_s: float
    steps_s: list[float]
    """Each decode step's time (token i to token i + 1), in order: new tokens − 1 of them."""
    total_s: float
    energy_j: float | None = None
    forwards_s: list[float] = field(default_factory=list)
    """Each forward's time: the prefill, then each decode step's (new tokens of them)."""
    job: str | None = None
    """The step model in whose job's rounds the run was made; None for a run made apart."""

    def as_dict(self) -> dict[str, Any]:
        """Return the run as JSON-ready data."""
        return {
            "ttft_s": self.ttft_s,
            "steps_s": self.steps_s,
            "total_s": self.total_s,
            "energy_j": self.energy_j,
            "forwards_s": self.forwards_s,
            "job": self.job,
        }

    @property
    def between_ttft_s(self) -> float | None:
        """TTFT − the prefill's forward, s: set-up and the first token's work."""
        return self.ttft_s - self.forwards_s[0] if self.forwards_s else None

    @property
    def between_steps_s(self) -> list[float]:
        """Each decode step − its forward, s: ``generate()``'s work between two forwards."""
        forwards = self.forwards_s[1 : len(self.steps_s) + 1]
        return [s - f for s, f in zip(self.steps_s, forwards, strict=False)]

    @property
    def tail_s(self) -> float:
        """From the last token handed out to ``generate()``'s return, s."""
        return max(self.total_s - self.ttft_s - sum(self.steps_s), 0.0)


@dataclass(frozen=True)
class GenerationTimes:
    """``generate()`` runs at one (batch, prompt, new tokens), with statistics."""

    batch: int
    prompt: int
    new_tokens: int
    runs: list[GenerateRun]
    energy_source: str | None = None
    energy_unavailable: str | None = None

    def made_in(self, jobs: Collection[str]) -> GenerationTimes | None:
        """Return the runs made in the rounds of ``jobs`` (step models).

        None where fewer than :data:`MIN_RUNS` were made there.
        """
        runs = [r for r in self.runs if r.job is not None and r.job in jobs]
        if len(runs) < MIN_RUNS:
            return None
        return replace(self, runs=runs)

    @property
    def ttft(self) -> Interval:
        """The median TTFT with its interval, s."""
        return median_interval([r.ttft_s for r in self.runs])

    @property
    def total(self) -> Interval:
        """The median time of a whole run with its interval, s."""
        return median_interval([r.total_s for r in self.runs])

    @property
    def tpot(self) -> Interval | None:
        """The median of (total − TTFT) / (new tokens − 1) with its interval, s; None for one."""
        if self.new_tokens < 2:
            return None
        return median_interval([(r.total_s - r.ttft_s) / (self.new_tokens - 1) for r in self.runs])

    @property
    def energy(self) -> Interval | None:
        """The median energy of a whole run with its interval, J; None where not read."""
        values = [r.energy_j for r in self.runs if r.energy_j is not None]
        return median_interval(values) if values else None

    @property
    def between_ttft(self) -> Interval | None:
        """Median TTFT − prefill with its interval, s; None where forwards were not timed."""
        values = [v for r in self.runs if (v := r.between_ttft_s) is not None]
        return median_interval(values) if values else None

    @property
    def between_step(self) -> Interval | None:
        """Median time between two decode forwards with its interval, s; None where untimed."""
        values = [v for r in self.runs for v in r.between_steps_s]
        return median_interval(values) if values else None

    @property
    def steps_s(self) -> list[float]:
        """Each decode step's median over the runs, s (the steps every run has; TPOT per step)."""
        steps = [r.steps_s for r in self.runs]
        return [
            median_interval([s[i] for s in steps]).value
            for i in range(min((len(s) for s in steps), default=0))
        ]

    @property
    def tail(self) -> Interval:
        """Median time from the last token to the return with its interval, s."""
        return median_interval([r.tail_s for r in self.runs])
