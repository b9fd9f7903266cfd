"""Significant operators: the configurations that make up most of a model's time.

Before anything is measured, a configuration's share is its roofline-bound time (the device
kind's peaks, measured or spec-sheet; a generic device where none is known). Once measured, its
measured time counts instead. The smallest set of configurations whose shares add up to the
coverage target is what must be measured first: the queue gives them a higher priority.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries, queue
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.peaks import best_peaks, peaks_for_kind

GENERIC_PEAKS = Peaks(flops_per_s=1e12, bytes_per_s=1e11, source="generic (no peaks known)")
"""Stand-in peaks (1 TFLOP/s, 100 GB/s) to rank configurations on a kind with no known peaks."""


@dataclass(frozen=True)
class Significance:
    """One configuration's share of the model's (estimated) time."""

    config_id: int
    key: str
    op: str
    time_s: float
    """count × per-call time: measured where measured, else roofline-bound (s)."""
    measured: bool
    share: float
    significant: bool


def significant_configs(
    session: Session, model_name: str, device_kind: str, *, target: float = 0.9
) -> list[Significance]:
    """Rank a model's measurable configurations by time share; mark those that reach ``target``.

    Raises:
        NotFoundError: unknown model.
        ValueError: ``target`` outside (0, 1].
    """
    if not 0 < target <= 1:
        raise ValueError(f"coverage target must be in (0, 1], got {target}")
    model = queries.get_model(session, model_name)
    peaks = best_peaks(peaks_for_kind(session, device_kind), model.dtype) or GENERIC_PEAKS
    rows = queries.model_configs(session, model.id, measurable_only=True)
    kind = queries.find_device_kind(session, device_kind)
    figures = (
        {}
        if kind is None
        else queries.config_figures(
            session, [mc.config.id for mc in rows], [kind.id], timing="eager"
        )
    )
    measured = {config_id: f.time_median_s for (config_id, _, _), f in figures.items()}
    items = []
    for mc in rows:
        cfg, count = mc.config, mc.count
        per_call = measured.get(cfg.id)
        if per_call is None:
            per_call = peaks.bound_s(cfg.flops, cfg.bytes)
        items.append((cfg, count * per_call, cfg.id in measured))
    total = sum(t for _, t, _ in items) or 1.0
    items.sort(key=lambda item: -item[1])
    out: list[Significance] = []
    reached = 0.0
    for cfg, t, is_measured in items:
        share = t / total
        significant = reached < target
        reached += share
        out.append(Significance(cfg.id, cfg.key, cfg.op, t, is_measured, share, significant))
    return out


def significance_priorities(
    session: Session,
    model_name: str,
    device_kind: str,
    *,
    target: float = 0.9,
    base: int = 0,
    boost: int = 10,
) -> dict[int, int]:
    """Return job priorities by config id: ``base + boost`` for significant ones, else ``base``."""
    return {
        s.config_id: base + (boost if s.significant else 0)
        for s in significant_configs(session, model_name, device_kind, target=target)
    }


def enqueue_significant_first(
    session: Session,
    model_name: str,
    device_kind: str,
    *,
    coverage: float = 0.9,
    priority: int = 0,
    **options: Any,
) -> queue.EnqueueResult:
    """Queue a model on a kind, the configurations making up ``coverage`` of its time first.

    The significant configurations get a priority above ``priority`` (see
    :func:`significance_priorities`); ``options`` go to :func:`operator_db.db.queue.enqueue_model`.

    Raises:
        InvalidInputError: ``device_kind`` is empty, over 200 characters or not printable.
        NotFoundError: unknown model.
        ValueError: ``coverage`` outside (0, 1].
    """
    queries.check_device_kind_name(device_kind)  # before any query looks the name up
    priorities = significance_priorities(
        session, model_name, device_kind, target=coverage, base=priority
    )
    return queue.enqueue_model(
        session, model_name, device_kind, priority=priority, priorities=priorities, **options
    )
