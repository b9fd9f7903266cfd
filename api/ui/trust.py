"""How far to trust what a page shows: a model's state per kind, an estimate's trust line, flags.

A model on a kind is not measured, measured whole only, partly (its operators n %) or complete;
an estimate's one-line summary says its error (with the interval), its coverage, the share of
its time resting on flagged figures, and whether its operators were timed in the model's replay
or looped alone; each flag shown gets its meaning (``operator_db.measure.flags``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.schemas import ModelKindOut
from operator_db.estimate.rows import OWN_SOURCE, is_imported
from operator_db.measure.flags import MEANING, TIME_DOUBTS, Flag

LOOPED_ALONE = (
    "looped alone: each operator was timed on its own, in a loop, not in the model's order"
)
"""What an estimate of operators timed looped alone leaves out."""
LOOPED_ALONE_CPU = (
    f"{LOOPED_ALONE}; on a CPU such sums came 13 % to 26 % below the model's run (ResNet-50, "
    "MobileNetV2, BERT: docs/measurement.md, “Replay in the model's order”)"
)
"""The same on a CPU, with the project's own figures there."""


def looped_alone(kind_type: str | None, sources: Mapping[str, int] | None) -> str:
    """Return what the page says of operators timed alone, where it applies.

    The CPU's figures only for operator-db's own results on a CPU; imported figures were timed
    one by one by their data set, which is all that is known of them.
    """
    found = dict(sources or {})
    imported = sorted(s for s in found if is_imported(s))
    if OWN_SOURCE not in found and imported:
        return (
            f"were each timed on their own by the data set they are imported from "
            f"({', '.join(imported)}), not in the model's order"
        )
    return LOOPED_ALONE_CPU if kind_type == "cpu" else LOOPED_ALONE


@dataclass(frozen=True)
class KindState:
    """What a model has on one device kind, in a word and a share."""

    device_kind: str
    state: str
    """``not measured``, ``whole model only``, ``operators`` (some) or ``complete``."""
    label: str
    """The words a page shows: ``operators 40 %`` for some."""
    runs: int
    """Whole-model runs on the kind (own and imported)."""


def kind_states(
    configs: int, figures: Sequence[ModelKindOut], kinds: Iterable[str]
) -> list[KindState]:
    """Return the model's state on each of ``kinds`` (every kind stored), by kind name.

    ``configs``: the model's configurations; ``figures``: the API's per-kind figures of it.
    Complete: every configuration has a result on the kind (an opaque one never has: it counts
    as not measured, as the estimate's coverage counts it).
    """
    by_kind = {f.device_kind: f for f in figures}
    out = []
    for kind in sorted(set(kinds) | set(by_kind)):
        f = by_kind.get(kind)
        runs = sum(f.model_runs.values()) if f is not None else 0
        done = f.configs_with_results if f is not None else 0
        if f is None or (not done and not runs):
            state, label = "not measured", "not measured"
        elif not done:
            state, label = "whole model only", "whole model only"
        elif done < configs:
            state, label = "operators", f"operators {100 * done / configs:.0f} %"
        else:
            state, label = "complete", "complete"
        out.append(KindState(kind, state, label, runs))
    return out


def _flags(value: str | Sequence[str] | None) -> list[str]:
    if not value:
        return []
    return [f for f in (value.split(",") if isinstance(value, str) else value) if f]


def flag_shares(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Return the share of the composed time whose figure carries each doubt, largest first.

    Only the flags that put a time in doubt (``TIME_DOUBTS``: not ``interleaved``, which says how).

    ``rows``: an estimate's configuration rows (``time_s``, ``flags``); a row without a time
    counts for nothing.
    """
    timed = [r for r in rows if r.get("time_s") is not None]
    total = sum(float(r["time_s"]) for r in timed)
    if total <= 0:
        return {}
    doubts = {str(f) for f in TIME_DOUBTS}
    shares: dict[str, float] = {}
    for r in timed:
        for flag in doubts & set(_flags(r.get("flags"))):
            shares[flag] = shares.get(flag, 0.0) + float(r["time_s"]) / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def doubtful_share(rows: Iterable[Mapping[str, Any]]) -> float | None:
    """Return the share of the composed time from figures flagged as doubtful (``TIME_DOUBTS``).

    None where nothing is composed.
    """
    timed = [r for r in rows if r.get("time_s") is not None]
    total = sum(float(r["time_s"]) for r in timed)
    if total <= 0:
        return None
    doubts = {str(f) for f in TIME_DOUBTS}
    flagged = [r for r in timed if doubts & set(_flags(r.get("flags")))]
    return sum(float(r["time_s"]) for r in flagged) / total


def legend(flags: Iterable[str]) -> list[tuple[str, str]]:
    """Return each flag named in ``flags`` with its meaning, in the order of the vocabulary."""
    named = set(flags)
    return [(str(f), MEANING[f]) for f in Flag if str(f) in named]


def flags_in(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """Return every flag the rows carry."""
    return {f for r in rows for f in _flags(r.get("flags"))}
