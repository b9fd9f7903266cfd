"""The roofline of a stored model on a device kind: its estimate, its table, its roofs, its plot.

One home for what ``opdb roofline`` and ``GET /models/{name}/roofline`` both do.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.queries import CounterFigures
from operator_db.errors import NotFoundError
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.chip_plot import RoofPoint
from operator_db.roofline.model import plot_roofline, roofline_table
from operator_db.roofline.peaks import peaks_for_kind, peaks_of


@dataclass
class ModelRoofline:
    """A model's estimate on a kind with its roofline table and the kind's roofs for its dtype."""

    estimate: Estimate
    table: pd.DataFrame
    spec: Peaks | None
    measured: Peaks | None
    dtype: str

    def plot(self, path: Path, *, chips: Sequence[str] = ()) -> Path:
        """Draw the plot into ``path`` (its suffix picks the format: .png, .svg); return it.

        Raises:
            OperatorDBError: matplotlib is missing, or nothing is measured to plot.
            ConfigurationError: a chip name matches no chip of the table.
        """
        return plot_roofline(
            self.estimate,
            self.table,
            path,
            spec=self.spec,
            measured=self.measured,
            chips=chips,
            dtype=self.dtype,
        )

    def render(self, fmt: Literal["png", "svg"], *, chips: Sequence[str] = ()) -> bytes:
        """Return the plot as PNG or SVG bytes (see :meth:`plot`)."""
        with tempfile.TemporaryDirectory(prefix="opdb-roofline-") as tmp:
            return self.plot(Path(tmp) / f"roofline.{fmt}", chips=chips).read_bytes()


def model_roofline(session: Session, model_name: str, device_kind: str) -> ModelRoofline:
    """Return the roofline of ``model_name`` on ``device_kind`` (measured roofs, else spec).

    Configurations with Nsight Compute counters on the kind are drawn at their measured FLOPs and
    DRAM bytes (the table's ``source``; docs/ncu.md).

    Raises:
        NotFoundError: unknown model or kind, or no peaks known for the kind.
    """
    model = queries.get_model(session, model_name)
    kind_peaks = peaks_for_kind(session, device_kind)
    spec = peaks_of(kind_peaks, model.dtype, "spec")
    measured = peaks_of(kind_peaks, model.dtype, "measured")
    if spec is None and measured is None:
        raise NotFoundError(
            f"no peaks known for {device_kind}: run `opdb peaks` on such a host, or use "
            "a device kind of the peak table (`opdb peaks --list`)"
        )
    est = estimate_model(session, model_name, device_kind, EstimateOptions(peaks=measured or spec))
    kind = queries.get_device_kind(session, device_kind)
    counters = {
        key: CounterFigures.of(row)
        for key, row in queries.model_counters(session, model.id, kind.id).items()
    }
    table = roofline_table(est, spec, measured, counters)
    return ModelRoofline(est, table, spec, measured, model.dtype)


def model_points(session: Session, models: Sequence[str], kinds: Sequence[str]) -> list[RoofPoint]:
    """Return each model's whole-model point on each kind where it has an achieved FLOP/s.

    The point is the model's FLOPs over its compulsory bytes and its FLOPs over its measured
    full-model time (or its composed time at full coverage), as in ``opdb roofline``.

    Raises:
        NotFoundError: an unknown model, or a kind without peaks.
    """
    out: list[RoofPoint] = []
    for model in models:
        for kind in kinds:
            view = model_roofline(session, model, kind)
            row = view.table[view.table["op"] == "(model)"].iloc[0]
            achieved = row["achieved_flops_per_s"]
            if achieved and row["bytes"] and achieved == achieved:  # NaN: not measured
                label = f"{model} ({view.dtype}) on {kind}"
                out.append(RoofPoint(label, float(row["intensity"]), float(achieved)))
    return out
