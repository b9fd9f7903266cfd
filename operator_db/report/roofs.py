"""The report's roofline counts: which roof, or algorithm, explains each point.

The roofs: DRAM, cache, compute; above every roof, a Winograd or FFT convolution, or none.

Every configuration of each kind on its roofs (:func:`configs_section`), and the whole-model runs
of the roofline section classified the same way (:func:`classify_runs`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind
from operator_db.errors import NotFoundError
from operator_db.report.document import Document
from operator_db.roofline.attained import short_op
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.configs import kind_configs_roofline
from operator_db.roofline.explain import (
    ROOF_CLASSES,
    RoofClass,
    RoofCounts,
    above,
    cache_levels,
    class_labels,
    roof_class,
    times,
)

CONFIGS_PLOT = "configs_roofline_{i:02d}_{slug}.png"
"""One plot per kind with per-operator results (``PLOT_PATTERNS``: ``configs_roofline_*.png``)."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:48] or "x"


def classify_runs(points: pd.DataFrame, roof: Peaks | None) -> pd.DataFrame:
    """Return whole-model runs with the roof that explains each.

    ``points`` has ``step_flops``, ``step_bytes`` and ``latency_s``; added are ``roof`` (the
    class; None without a roof or a time), ``roof_label`` (the class as people read it:
    ``DRAM-bound``, ``L2-explained``) and ``above`` (bound / latency).
    """
    classes: list[RoofClass | None] = []
    aboves: list[float] = []
    for flops, nbytes, latency in zip(
        points["step_flops"], points["step_bytes"], points["latency_s"], strict=True
    ):
        ok = roof is not None and _finite(flops, nbytes, latency) and float(latency) > 0
        if not ok or roof is None:
            classes.append(None)
            aboves.append(math.nan)
            continue
        classes.append(roof_class(float(flops), float(nbytes), float(latency), roof))
        aboves.append(above(float(flops), float(nbytes), float(latency), roof))
    labels = class_labels(roof)
    return points.assign(
        roof=classes, above=aboves, roof_label=[None if c is None else labels[c] for c in classes]
    )


def _finite(*values: object) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values)


def counts_line(counts: RoofCounts, roof: Peaks | None, *, named: Sequence[str] = ()) -> str:
    """Return ``By roof: 3 DRAM-bound, 1 L2-explained, ...`` with the cache roofs named.

    ``named``: cache levels said elsewhere (an attained roof's own line), left out here.
    """
    text = f"By roof: {counts.describe(roof)}."
    caches = [c for c in roof.caches if c.level not in named] if roof is not None else []
    if caches:
        text += " Cache roofs: " + "; ".join(
            f"{c.level} {c.bytes_per_s / 1e9:.4g} GB/s ({c.source})" for c in caches
        )
        text += "."
    return text


def configs_section(
    doc: Document, session: Session, kinds: Sequence[DeviceKind], out: Path
) -> None:
    """Write every configuration of each kind on its roofs, counted by the roof explaining it."""
    doc.heading("Configurations on the device roofs")
    stored = queries.count_results(session).counts
    with_results = {kind_id for (kind_id, _), n in stored.items() if n}
    shown = [k for k in sorted(kinds, key=lambda k: k.name) if k.id in with_results]
    if not shown:
        doc.para(
            "No per-operator result is stored on the device kinds covered: no configuration to "
            "place on a roofline."
        )
        return
    doc.para(
        "Every configuration with a result on the kind (its own result where one exists, else "
        "an imported one) at its FLOPs / compulsory bytes and its FLOPs / per-call time, against "
        "the kind's roofs for its dtype: the spec sheet's (or those `opdb peaks` measured), and "
        "where a configuration beats the DRAM roof, a cache roof. A CPU's cache roofs are "
        "measured copies; a GPU's L2 roof is attained: no vendor publishes an L2 bandwidth, so "
        "it is the fastest compulsory bytes / time of a configuration that fits in the L2, and a "
        'roof only where that beats the DRAM roof (docs/peaks.md, "A GPU\'s L2 roof"). Each '
        "point is counted under the roof that explains it: DRAM-bound or compute-bound (at or "
        "below the plain roof), explained by a cache roof (above the DRAM roof, within the "
        "cache's), explained by an algorithm (above every roof, but its imported result names a "
        "Winograd or FFT kernel, which runs fewer FLOPs than the direct convolution's counted, "
        "and it is no further above the compute roof than that algorithm's FLOP reduction "
        "allows: Winograd F(4×4, 3×3) 4×, F(2×2, 3×3) 2.25×, FFT on 32×32 transforms 3.72×), "
        "or unexplained (above every roof otherwise: operator-db's own results record no kernel "
        "names). In the plots the cache-explained points are ringed, the algorithm-explained "
        "ones marked with purple diamonds, the unexplained ones crossed."
    )
    views, rows = [], []
    for kind in shown:
        try:
            view = kind_configs_roofline(session, kind.name)
        except NotFoundError as exc:  # no peaks known for the kind: said, not fatal
            doc.para(f"**{kind.name}**: {exc}")
            continue
        views.append(view)
        roof, counts = view.reference, view.counts
        labels = class_labels(None)  # one column per class whatever the kind's cache levels
        rows.append(
            {
                "device kind": kind.name,
                "configurations": counts.total,
                **{labels[c]: counts.of(c) for c in ROOF_CLASSES},
                "cache roofs": cache_levels(roof) if roof is not None and roof.caches else "—",
                "most above every roof": "—"
                if counts.most_above is None
                else times(counts.most_above),
            }
        )
    if rows:
        doc.table(pd.DataFrame.from_records(rows))
    for i, view in enumerate(views):
        roof = view.reference
        name = CONFIGS_PLOT.format(i=i, slug=_slug(view.kind_name))
        doc.para(
            f"**{view.kind_name}** ({view.dtype} roofs: {roof.source if roof else 'none'})"
            + (
                f"; {view.left_out} configurations without FLOPs/bytes left out"
                if view.left_out
                else ""
            )
        )
        try:
            view.plot(out / name)
        except NotFoundError as exc:  # no configuration with FLOPs, bytes and a time
            doc.para(str(exc))
        else:
            doc.image(name, f"Configurations on the roofline of {view.kind_name}")
        named = [r.level for r in view.attained]
        lost = view.unexplained_ops()
        why = [f"Explained by an algorithm: {r.describe()}." for r in view.reasons("algorithm")]
        if lost:
            why.append(
                "Unexplained, by operator: "
                + ", ".join(f"{short_op(op)} {n}" for op, n in lost.most_common())
                + "; why: "
                + "; ".join(r.describe() for r in view.reasons("unexplained"))
                + ". A point above every roof ran fewer FLOPs or moved fewer bytes than counted, "
                "or its roof is wrong."
            )
        doc.bullets([counts_line(view.counts, roof, named=named), *view.attained_lines(), *why])
