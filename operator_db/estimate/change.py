"""Did it change? Two results of one configuration or model, beyond noise or not.

criterion.rs reports a change only where its confidence interval excludes no change and the change
is larger than a noise threshold; this applies it to the database. Two results of the same target
on the same device kind (two dates, two hosts, two driver or torch versions) are picked by
selectors, and their medians compared on the log scale with both intervals
(``stats.error_interval``): ``b`` relative to ``a``.

Selectors (newest first among the target's results): ``newest``, ``previous`` (the one before
the newest), an id (``123`` or ``id:123``), ``host:NAME``, ``driver:VERSION``, ``torch:VERSION``,
``before:YYYY-MM-DD`` (the newest before that day, UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.queries import Result
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.noise import run_interval
from operator_db.stats import Interval, error_interval, median_interval

THRESHOLD = 0.01
"""A change smaller than this share is no change, even beyond noise (criterion's 1 %)."""

Verdict = Literal["slower", "faster", "within noise", "below threshold", "unknown"]


@dataclass(frozen=True)
class ChangeQuery:
    """What to compare: a model, or one of its configurations, on a kind, and which two results."""

    model: str
    device_kind: str
    config_key: str | None = None
    """A configuration of the model (its key); None: the whole model's runs."""
    a: str = "previous"
    b: str = "newest"
    timing: str = "eager"
    threshold: float = THRESHOLD


@dataclass(frozen=True)
class Change:
    """Two results and the change from ``a`` to ``b``."""

    target: str
    device_kind: str
    a: Result
    b: Result
    a_time: Interval
    b_time: Interval
    change: Interval
    """(b − a) / a with its interval (95 %)."""
    threshold: float

    @property
    def verdict(self) -> Verdict:
        """``slower``/``faster`` beyond noise and threshold, else why not."""
        c = self.change
        if any(t.high <= t.low for t in (self.a_time, self.b_time)):
            return "unknown"  # a side without samples: its noise is not known
        if c.holds(0.0):
            return "within noise"
        if abs(c.value) < self.threshold:
            return "below threshold"
        return "slower" if c.value > 0 else "faster"

    def as_dict(self) -> dict[str, Any]:
        """Return the comparison as JSON-ready data."""

        def side(r: Result, t: Interval) -> dict[str, Any]:
            return {
                "id": r.id,
                "created_at": r.created_at.isoformat(),
                "host": r.host,
                "driver_version": r.driver_version,
                "torch_version": r.torch_version,
                "flags": r.flags,
                "time": t.as_dict(),
            }

        return {
            "target": self.target,
            "device_kind": self.device_kind,
            "a": side(self.a, self.a_time),
            "b": side(self.b, self.b_time),
            "change": self.change.as_dict(),
            "threshold": self.threshold,
            "verdict": self.verdict,
        }


def pick(results: list[Result], selector: str) -> Result:
    """Return the result a selector names among ``results`` (newest first).

    Raises:
        InvalidInputError: an unknown selector or a malformed date.
        NotFoundError: no result matches.
    """
    kind, _, value = selector.partition(":")
    if not value and kind.isdigit():
        kind, value = "id", kind
    found: Result | None = None
    if kind == "newest" and not value:
        found = results[0] if results else None
    elif kind == "previous" and not value:
        found = results[1] if len(results) > 1 else None
    elif kind == "id":
        found = next((r for r in results if str(r.id) == value), None)
    elif kind == "host":
        found = next((r for r in results if r.host == value), None)
    elif kind == "driver":
        found = next((r for r in results if r.driver_version == value), None)
    elif kind == "torch":
        found = next((r for r in results if r.torch_version == value), None)
    elif kind == "before":
        try:
            day = datetime.fromisoformat(value).replace(tzinfo=UTC)
        except ValueError as exc:
            raise InvalidInputError(f"before:{value}: not a date (YYYY-MM-DD)") from exc
        found = next((r for r in results if r.created_at < day), None)
    else:
        raise InvalidInputError(
            f"unknown selector {selector!r}: newest, previous, an id, host:NAME, "
            "driver:VERSION, torch:VERSION or before:YYYY-MM-DD"
        )
    if found is None:
        raise NotFoundError(f"no result matches {selector!r} ({len(results)} stored)")
    return found


def time_of(result: Result) -> Interval:
    """Return a result's median time with its interval (from its samples where not stored)."""
    if (result.time_low_s is None or result.time_high_s is None) and len(result.samples) > 1:
        return median_interval(result.samples)
    found = run_interval(
        result.time_median_s, result.time_low_s, result.time_high_s, result.time_ci_level
    )
    assert found is not None  # a stored result always has its median
    return found


def compare_results(session: Session, query: ChangeQuery) -> Change:
    """Compare two results of the query's target.

    Raises:
        NotFoundError: unknown model, kind or configuration, or a selector matches nothing.
        InvalidInputError: a bad selector, or both selectors name one result.
    """
    model = queries.get_model(session, query.model)
    kind = queries.get_device_kind(session, query.device_kind)
    what: Literal["config", "model"] = "model"
    target_id, name = model.id, model.name
    if query.config_key is not None:
        ids = queries.config_ids_by_key(session, [query.config_key])
        if query.config_key not in ids:
            raise NotFoundError(f"no configuration {query.config_key!r} in {model.name}")
        what, target_id, name = "config", ids[query.config_key], query.config_key
    results = queries.results_of(session, what, target_id, kind.id, timing=query.timing)
    a, b = pick(results, query.a), pick(results, query.b)
    if a.id == b.id:
        raise InvalidInputError(
            f"{query.a!r} and {query.b!r} are the same result ({a.id}): "
            f"{len(results)} stored; pick two"
        )
    ta, tb = time_of(a), time_of(b)
    return Change(name, kind.name, a, b, ta, tb, error_interval(tb, ta), query.threshold)
