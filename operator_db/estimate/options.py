"""The choices of one estimate (:class:`EstimateOptions`), and what each may be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from operator_db.db.queries import Aggregate
from operator_db.estimate.predicted import Predicted
from operator_db.roofline.bounds import Peaks

TimingChoice = Literal["eager", "graph"]
CacheChoice = Literal["warm", "cold"]
AggregateChoice = Aggregate
EnergyChoice = Literal["total", "dynamic"]
ContextChoice = Literal["replay", "alone"]
"""Which per-call times of a CPU model's operators it composes: those timed in a replay of the
model's call order where its newest run has one (``replay``), or those looped alone (``alone``)."""

BETWEEN_OPS_WARN = 0.10
"""Default share of the estimate above which the time between operators is a warning
(``OPDB_ESTIMATE_BETWEEN_OPS_WARN``)."""


@dataclass(frozen=True)
class EstimateOptions:
    """The choices of one estimate (:func:`estimate_model` says what each does)."""

    timing: TimingChoice = "eager"
    energy: EnergyChoice = "total"
    peaks: Peaks | Literal["best"] | None = None
    aggregate: AggregateChoice = "latest"
    cache_mode: CacheChoice = "warm"
    between_ops_warn: float = BETWEEN_OPS_WARN
    """Share of the estimate above which the time between operators is a warning."""
    predicted: Predicted | None = None
    context: ContextChoice = "replay"
