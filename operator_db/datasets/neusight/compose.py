"""The composition check: each imported NeuSight run against the estimate composed for it.

For every run imported from a label (``runs.import_runs``), the estimate of its spec's model on
its GPU — Σ count × per-call time of the model's configurations from the stored results, here the
per-node times its trace gave (``runs.py``) — beside the measured run, the error, the estimate's
coverage of calls and the trace's coverage of time (``runs.TraceSummary``).

The data sets layer does not compose estimates (``estimate/`` is not among its imports,
docs/architecture.md): the caller passes the estimate as a function, e.g.
``lambda s, model, kind: estimate_model(s, model, kind, EstimateOptions(aggregate="median",
peaks="best"))`` (the median of the nodes a configuration was mapped from; the best-known
roofs for the roofline-weighted coverage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from operator_db.datasets.neusight.runs import RunInfo


class EstimateLike(Protocol):
    """What the check reads of an estimate (``operator_db.estimate.compose.Estimate``)."""

    @property
    def total_time_s(self) -> float:
        """The estimate, s."""

    @property
    def full_run_time_s(self) -> float | None:
        """The newest full-model run on the kind, s."""

    @property
    def coverage(self) -> float:
        """Measured calls / all calls."""

    @property
    def coverage_roofline(self) -> float | None:
        """Share of the roofline-bound time measured."""


Estimator = Callable[[Session, str, str], EstimateLike]
"""(session, model name, device kind name) → its estimate."""


@dataclass(frozen=True)
class CompositionRow:
    """One run: its estimate, its measurement, and how much of each rests on the trace."""

    device: str
    model: str
    mode: str
    seqlen: int
    batch: int
    estimate_s: float
    measured_s: float
    coverage: float
    """The estimate's coverage of the model's calls."""
    coverage_roofline: float | None
    """The estimate's coverage of the model's roofline-bound time (None without roofs)."""
    trace_coverage: float | None
    """Σ time of the trace's mapped nodes / Σ time of all its nodes (first layer repeated)."""
    trace_s: float | None
    """Σ time of all the trace's nodes, first layer repeated ``num_layer`` times, s."""

    @property
    def error(self) -> float:
        """(estimate − measured) / measured."""
        return (self.estimate_s - self.measured_s) / self.measured_s


def composition_table(
    session: Session, runs: Sequence[RunInfo], estimate: Estimator
) -> list[CompositionRow]:
    """Return, per run, its estimate against its measurement (GPU, model, mode, batch order)."""
    out = []
    for run in sorted(runs, key=lambda r: (r.device, r.model)):
        est = estimate(session, run.model, run.device)
        trace = run.trace
        out.append(
            CompositionRow(
                device=run.device,
                model=run.model,
                mode=run.mode,
                seqlen=run.seqlen,
                batch=run.batch,
                estimate_s=est.total_time_s,
                measured_s=est.full_run_time_s or run.measured_s,
                coverage=est.coverage,
                coverage_roofline=est.coverage_roofline,
                trace_coverage=None if trace is None else trace.coverage,
                trace_s=None if trace is None else trace.total_ms / 1000,
            )
        )
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def composition_text(rows: Sequence[CompositionRow]) -> str:
    """Return the table as Markdown: times in ms, errors and coverages in %."""
    header = (
        "| GPU | model | mode | batch | estimate ms | measured ms | error | coverage (calls) "
        "| coverage (roofline) | trace coverage | trace Σ / measured |"
    )
    lines = [header, "|" + " --- |" * 11]
    for r in rows:
        ratio = None if r.trace_s is None else r.trace_s / r.measured_s
        lines.append(
            f"| {r.device} | {r.model.removeprefix('neusight-')} | {r.mode} | {r.batch} "
            f"| {1000 * r.estimate_s:.1f} | {1000 * r.measured_s:.1f} | {100 * r.error:+.1f} % "
            f"| {_pct(r.coverage)} | {_pct(r.coverage_roofline)} | {_pct(r.trace_coverage)} "
            f"| {'-' if ratio is None else f'{ratio:.3f}'} |"
        )
    return "\n".join(lines)
