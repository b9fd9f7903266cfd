"""The rows of an estimate: sums that skip unknowns, per operator type, JSON, its warnings."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

CONFIG_COLUMNS = [
    "key",
    "op",
    "form",
    "inputs",
    "count",
    "flops",
    "bytes",
    "params",
    "measured",
    "source",
    "timing",
    "time_per_call_s",
    "time_low_per_call_s",
    "time_high_per_call_s",
    "time_ci_level",
    "time_s",
    "host_time_per_call_s",
    "energy_per_call_j",
    "energy_j",
    "energy_low_per_call_j",
    "energy_high_per_call_j",
    "energy_ci_level",
    "roofline_time_per_call_s",
    "roofline_time_s",
    "time_share",
    "flags",
]
BY_OP_COLUMNS = ["op", "configs", "calls", "time_s", "energy_j", "flops", "time_share"]


def between_warnings(between_s: float, operators_s: float, limit: float) -> list[str]:
    """Warn when the time between operators, added to them, is over ``limit`` of the total."""
    between_s = max(between_s, 0.0)
    total = operators_s + between_s
    if total <= 0 or between_s / total <= limit:
        return []
    return [
        f"time between operators (hollow run) is {between_s / total:.1%} of the estimate, over "
        f"{limit:.0%} (OPDB_ESTIMATE_BETWEEN_OPS_WARN): the figure rests on it, not on measured "
        "operators; opaque modules and calls the spec skipped run there for real, as does the "
        "Python between operators"
    ]


def coverage_warnings(
    coverage: float,
    coverage_roofline: float | None,
    unmeasured: list[str],
    opaque_rows: list[dict[str, Any]],
) -> list[str]:
    """Say what the operators' sum leaves out: configurations not measured yet, opaque ones."""
    if coverage >= 1:
        return []
    share = f"{coverage:.1%} of calls" + (
        "" if coverage_roofline is None else f", {coverage_roofline:.1%} of roofline-bound time"
    )
    found = [f"coverage {share} measured: the operators' sum leaves out the rest"]
    if unmeasured:
        found.append(f"{len(unmeasured)} configurations not measured yet: the estimate is partial")
    if len(opaque_rows):
        calls = sum(r["count"] for r in opaque_rows)
        names = ", ".join(dict.fromkeys(r["op"] for r in opaque_rows))
        found.append(
            f"{len(opaque_rows)} opaque configurations ({calls} calls: {names[:300]}) cannot be "
            "measured and are left out of the operators' sum"
        )
    return found


def finite_values(row: dict[str, Any]) -> dict[str, Any]:
    """Return ``row`` with each NaN or infinite float replaced by None (JSON has neither)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def sum_known(values: Iterable[float | None]) -> float:
    """Return the sum of the known values (None skipped, as pandas does), 0.0 for none."""
    return math.fsum(v for v in values if v is not None)


def sum_if_all_known(values: Iterable[float | None]) -> float | None:
    """Return the sum of ``values`` if every one is known, else None (also for none at all).

    An energy total over configurations where one has no energy would understate it.
    """
    listed = list(values)
    if not listed or any(v is None for v in listed):
        return None
    return math.fsum(v for v in listed if v is not None)


def by_op(records: list[dict[str, Any]], total_time: float) -> list[dict[str, Any]]:
    """Per operator type, costliest first: configurations, calls, time (s), energy (J), FLOPs.

    An operator type with no known energy has None, not 0 J; with no known time, None, not 0 s
    (nothing of it measured), and it comes last.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["op"], []).append(r)
    rows = []
    for op, group in groups.items():
        times = [r["time_s"] for r in group if r["time_s"] is not None]
        time_s = sum_known(times) if times else None
        energies = [r["energy_j"] for r in group if r["energy_j"] is not None]
        rows.append(
            {
                "op": op,
                "configs": len(group),
                "calls": sum(r["count"] for r in group),
                "time_s": time_s,
                "energy_j": math.fsum(energies) if energies else None,
                "flops": sum(r["count"] * (r["flops"] or 0) for r in group),
                "time_share": time_s / total_time
                if time_s is not None and total_time > 0
                else None,
            }
        )
    rows.sort(key=lambda row: (row["time_s"] is not None, row["time_s"] or 0.0), reverse=True)
    return rows


def between_ops(hollow_s: float | None, records: list[dict[str, Any]]) -> float | None:
    """Hollow run − Σ count × per-call time of the functional operators, in s (None if unknown).

    ``records`` are an estimate's configuration rows: the functional operators' times are those
    it composes (in the replay of the model's calls where it has them: what the hollow run, which
    still runs them inside the model, loses to them).
    """
    if hollow_s is None:
        return None
    functional = [r for r in records if r["form"] == "function"]
    if not all(r["measured"] for r in functional):
        return None
    return hollow_s - sum_known(r["time_s"] for r in functional)


OWN_SOURCE = "measured"
"""A figure's ``source`` where operator-db measured it; a data set's name where imported."""
PREDICTED_SOURCE = "predicted"
"""A figure's ``source`` where a predictor gave it."""


def is_imported(source: str | None) -> bool:
    """Whether a figure's ``source`` names a data set (imported: neither own nor predicted)."""
    return source not in (None, OWN_SOURCE, PREDICTED_SOURCE)


def source_notes(records: list[dict[str, Any]], run: Any, names: dict[int, str]) -> list[str]:
    """Say which figures were imported from a data set (not measured by operator-db).

    ``run``: the full-model run's figure (``queries.Figure``) or None; ``names``: data source
    names by id. Imported figures were measured by others, with their method (``opdb import``):
    the estimate never passes them for its own.
    """
    notes = []
    imported: dict[str, int] = {}
    for r in records:
        if is_imported(r["source"]):
            imported[r["source"]] = imported.get(r["source"], 0) + 1
    for name, n in sorted(imported.items()):
        notes.append(
            f"imported: {n} of {len(records)} configurations' times from the data set {name} "
            "(measured by others, with their method; `opdb import`), not measured here"
        )
    if run is not None and run.source_id:
        notes.append(
            f"the full-model run was imported from the data set {names.get(run.source_id, '?')}"
        )
    return notes


def count_sources(records: list[dict[str, Any]]) -> dict[str, int]:
    """Return the configurations per source of their figure.

    ``measured`` (operator-db's own), a data set's name (imported), ``predicted``; unknown ones
    are not counted.
    """
    out: dict[str, int] = {}
    for r in records:
        if r["source"] is not None:
            out[r["source"]] = out.get(r["source"], 0) + 1
    return out


HOST_NOISY = "host_noisy"
"""The flag of a result measured while the host was noisy (``measure.flags.Flag.HOST_NOISY``)."""


def noisy_host_warnings(rows: list[dict[str, Any]], run_flags: Iterable[str]) -> list[str]:
    """Warn where figures were measured on a noisy host (flag ``host_noisy``), saying which."""
    keys = [r["op"] for r in rows if HOST_NOISY in str(r.get("flags") or "").split(",")]
    run = HOST_NOISY in set(run_flags)
    if not keys and not run:
        return []
    what = []
    if keys:
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        what.append(f"{len(keys)} configurations ({shown})")
    if run:
        what.append("the model's run")
    return [
        f"measured on a noisy host (flag {HOST_NOISY}): {' and '.join(what)}; their figures "
        "may be off (the results' provenance says why: steal, other load, clocks)"
    ]
