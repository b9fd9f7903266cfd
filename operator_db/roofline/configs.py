"""A device kind's configurations on its roofs: every configuration with a result there, one point.

What ``opdb roofline --device-kind KIND`` (no model) draws and the report's "Configurations on the
device roofs" section shows: each configuration at its arithmetic intensity (FLOPs / compulsory
bytes) and achieved FLOP/s (FLOPs / its figure's per-call time: own results first, else imported
ones, :func:`~operator_db.db.queries.config_figures`), against the kind's roofs for its dtype
(spec, measured, and a GPU's attained L2 roof, :mod:`.attained`), each point put in the class of
the roof that explains it, or of the Winograd or FFT kernel its imported result names
(:mod:`.explain`).
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.errors import NotFoundError
from operator_db.roofline.attained import MIB, AttainedRoof, short_op
from operator_db.roofline.bounds import Peaks, arithmetic_intensity
from operator_db.roofline.chips import chip_spec
from operator_db.roofline.explain import (
    NO_KERNEL,
    RoofCounts,
    above,
    count_classes,
    explain_above,
    roof_class,
    times,
)
from operator_db.roofline.peaks import KindPeaks, kind_peaks, peaks_of

if TYPE_CHECKING:
    import pandas as pd

CONFIG_COLUMNS = [
    "key",
    "op",
    "dtype",
    "flops",
    "bytes",
    "intensity",
    "time_per_call_s",
    "achieved_flops_per_s",
    "attained_bytes_per_s",
    "bound_s",
    "above",
    "roof",
    "why",
    "imported",
]
"""Columns of :attr:`ConfigsRoofline.table`: times in s, work per call, ``above`` = bound / time
(> 1 above the roofs), ``roof`` the class (:data:`~operator_db.roofline.explain.RoofClass`),
``why`` the algorithm of an ``algorithm`` point or why an ``unexplained`` one is (else None),
``imported`` whether the figure is an imported result."""

TOP_OPS = 8
"""Operator types coloured apart in the plot (the most frequent); the rest grey."""


@dataclass(frozen=True)
class AbovePlain:
    """Configurations above the plain roof (no cache level): its DRAM part, its compute part."""

    above_dram: int = 0
    """Memory-bound by the plain roof, with compulsory bytes / time above its bandwidth."""
    dram_most: float | None = None
    """The largest attained bandwidth / DRAM bandwidth among them."""
    above_dram_in_l2: int | None = None
    """How many of them fit in the chip's L2 (None: no L2 known)."""
    above_compute: int = 0
    """With achieved FLOP/s above the compute peak."""
    compute_most: float | None = None
    """The largest achieved / peak FLOP/s among them."""
    above_compute_in_l2: int | None = None
    l2_bytes: float | None = None
    """The chip's L2, bytes (None: not on its spec sheet)."""

    def describe(self) -> str:
        """Return ``above the DRAM roof: 7 (up to 1.91×; 3 fit in the 48 MiB L2); ...``."""

        def part(n: int, most: float | None, fit: int | None) -> str:
            if not n:
                return "0"
            text = f"{n} (up to {most:.2f}×"
            if fit is not None and self.l2_bytes is not None:
                text += f"; {fit} fit in the {self.l2_bytes / MIB:g} MiB L2"
            return text + ")"

        return (
            f"above the DRAM roof: {part(self.above_dram, self.dram_most, self.above_dram_in_l2)}"
            f"; above the compute roof: "
            f"{part(self.above_compute, self.compute_most, self.above_compute_in_l2)}"
        )


@dataclass(frozen=True)
class Reason:
    """Why some configurations are in their class: an algorithm, or why none explains them."""

    why: str
    configs: int
    most_above: float
    """The largest bound / time among them (> 1: above the roofs)."""

    def describe(self) -> str:
        """Return ``758, Winograd F(4×4, 3×3): up to 4× fewer FLOPs; at most 2.06× above``."""
        return f"{self.configs}, {self.why}; at most {times(self.most_above)} above the roofs"


@dataclass
class ConfigsRoofline:
    """A kind's configurations with the roofs they are classified against."""

    kind_name: str
    dtype: str
    """The dtype whose roofs are drawn (the kind's most frequent)."""
    table: pd.DataFrame
    spec: Peaks | None
    measured: Peaks | None
    attained: tuple[AttainedRoof, ...]
    """The kind's attained cache roofs, applied or not (one no faster than DRAM is no roof)."""
    left_out: int = 0
    """Measured configurations without FLOPs or bytes in their spec: no point, not in ``table``."""

    @property
    def reference(self) -> Peaks | None:
        """The roof the points are classified against: measured where known, else spec."""
        return self.measured or self.spec

    @property
    def counts(self) -> RoofCounts:
        """How many configurations each roof explains (of the drawn dtype's roofs)."""
        return count_classes(self.table["roof"], self.table["above"])

    def above_plain(self) -> AbovePlain:
        """Count the configurations (of the drawn dtype) above the plain roof's two parts."""
        roof = self.reference
        chip = chip_spec(self.kind_name)
        l2 = chip.l2_cache_bytes if chip is not None else None
        t = self.table[(self.table["dtype"] == self.dtype) & (self.table["time_per_call_s"] > 0)]
        if roof is None or t.empty:
            return AbovePlain(l2_bytes=l2)
        memory_bound = t["bytes"] / roof.bytes_per_s >= t["flops"] / roof.flops_per_s
        dram = t[memory_bound & (t["attained_bytes_per_s"] > roof.bytes_per_s)]
        compute = t[t["achieved_flops_per_s"] > roof.flops_per_s]

        def most(values: pd.Series[float]) -> float | None:
            return float(values.max()) if len(values) else None

        def in_l2(rows: pd.DataFrame) -> int | None:
            return None if l2 is None else int((rows["bytes"] <= l2).sum())

        return AbovePlain(
            len(dram),
            most(dram["attained_bytes_per_s"] / roof.bytes_per_s),
            in_l2(dram),
            len(compute),
            most(compute["achieved_flops_per_s"] / roof.flops_per_s),
            in_l2(compute),
            l2,
        )

    def unexplained_ops(self) -> Counter[str]:
        """Return the unexplained configurations' count per operator type."""
        return Counter(self.table.loc[self.table["roof"] == "unexplained", "op"])

    def reasons(self, cls: str) -> list[Reason]:
        """Return the ``why`` of the configurations of class ``cls``, the most frequent first.

        Each with its count and how far above the roofs its points are at most.

        The algorithms of ``algorithm`` points (``Winograd F(4×4, 3×3): up to 4× fewer FLOPs``);
        the reasons of ``unexplained`` ones, each point's own figure left out (``more than
        Winograd F(4×4, 3×3) allows (4×)``).
        """
        rows = self.table[self.table["roof"] == cls]
        found: dict[str, Reason] = {}
        for why, ratio in zip(rows["why"].fillna(NO_KERNEL), rows["above"], strict=True):
            why = why.split(": ", 1)[1] if "× the compute roof: " in why else why
            was = found.get(why, Reason(why, 0, 0.0))
            found[why] = Reason(why, was.configs + 1, max(was.most_above, float(ratio)))
        return sorted(found.values(), key=lambda r: (-r.configs, r.why))

    def attained_lines(self) -> list[str]:
        """Return one line per attained roof: its rate, derivation and whether it is a roof."""
        memory = self.reference.bytes_per_s if self.reference is not None else None
        return [roof.describe(memory) for roof in self.attained]

    def plot(self, path: Path) -> Path:
        """Draw the roofs and every configuration; return ``path`` (suffix: .png or .svg).

        Raises:
            OperatorDBError: matplotlib is missing.
            NotFoundError: no configuration has FLOPs, bytes and a time to draw.
        """
        from operator_db.roofline.figure import draw_roofs, mark_classes, new_figure
        from operator_db.roofline.figure import roof_intensities as intensities

        t = self.table
        points = t[(t["flops"] > 0) & (t["bytes"] > 0) & (t["time_per_call_s"] > 0)]
        if points.empty:
            raise NotFoundError(
                f"nothing to plot: no configuration with FLOPs on {self.kind_name}"
                + (f" ({self.left_out} without FLOPs/bytes left out)" if self.left_out else "")
            )
        fig = new_figure(11.5, 7.0)
        ax = fig.add_subplot()
        lo = max(min(float(points["intensity"].min()) / 4, 0.01), 1e-4)
        hi = max(float(points["intensity"].max()) * 4, 1e3)
        draw_roofs(ax, intensities(lo, hi), spec=self.spec, measured=self.measured)
        ops = points["op"].value_counts()
        top = list(ops.index[:TOP_OPS])
        for i, op in enumerate([*top, None]):
            sel = points[points["op"] == op] if op is not None else points[~points["op"].isin(top)]
            if sel.empty:
                continue
            ax.scatter(
                sel["intensity"],
                sel["achieved_flops_per_s"],
                s=6,
                alpha=0.5,
                color=f"C{i + (i >= 7)}" if op is not None else "grey",  # C7 is grey
                linewidths=0,
                rasterized=True,
                label=f"{short_op(op)} ({len(sel)})" if op is not None else f"other ({len(sel)})",
            )
        counts = count_classes(points["roof"], points["above"])
        mark_classes(
            ax,
            list(points["intensity"]),
            list(points["achieved_flops_per_s"]),
            list(points["roof"]),
            self.reference,
            counts,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte of compulsory traffic)")
        ax.set_ylabel("achieved performance (FLOP/s)")
        others = int((points["dtype"] != self.dtype).sum())
        ax.set_title(
            f"Configurations on the roofline of {self.kind_name} ({self.dtype} roofs)\n"
            + textwrap.fill(
                f"{len(points)} configurations: {counts.describe(self.reference)}", width=150
            )
            + (f"\n{others} of other dtypes, classified against their own roofs" if others else "")
            + (f"; {self.left_out} without FLOPs/bytes left out" if self.left_out else ""),
            fontsize=9.5,
        )
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9, markerscale=1.5)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        return path


def _roofs(known: KindPeaks, dtype: str) -> Peaks | None:
    return peaks_of(known, dtype, "measured") or peaks_of(known, dtype, "spec")


def kind_configs_roofline(session: Session, kind_name: str) -> ConfigsRoofline:
    """Return every configuration with a result on ``kind_name`` against the kind's roofs.

    Each configuration is classified against the roofs of its own dtype (measured where known,
    else spec, each with the attained L2 where it applies); the roofs drawn are those of the
    kind's most frequent dtype. Configurations of a dtype without roofs keep no class.

    Raises:
        NotFoundError: unknown kind, no result stored on it, or no peaks known for it.
    """
    import pandas as pd  # the table: only when a roofline is asked for

    kind = queries.get_device_kind(session, kind_name)
    work = queries.kind_config_work(session, kind.id)
    if not work:
        raise NotFoundError(f"nothing measured on {kind_name}: no per-operator result stored")
    known = kind_peaks(session, kind, kind_name)
    dtypes = Counter(w.dtype or "float32" for w in work.values())
    dtype = dtypes.most_common(1)[0][0]
    spec = peaks_of(known, dtype, "spec")
    measured = peaks_of(known, dtype, "measured")
    if spec is None and measured is None:
        raise NotFoundError(
            f"no {dtype} peaks known for {kind_name}: run `opdb peaks` on such a host, or use "
            "a device kind of the peak table (`opdb peaks --list`)"
        )
    roofs = {d: _roofs(known, d) for d in dtypes}
    figures = queries.config_figures(session, None, [kind.id], timing="eager")
    rows: list[dict[str, Any]] = []
    ids: list[int] = []
    left_out = 0
    for (config_id, _, _), figure in figures.items():
        w = work.get(config_id)
        if w is None:
            continue
        if w.flops is None or w.bytes is None:  # no intensity: no point, no class
            left_out += 1
            continue
        flops, nbytes = float(w.flops), float(w.bytes)
        t = figure.time_median_s
        roof = roofs[w.dtype or "float32"]
        rows.append(
            {
                "key": w.key,
                "op": w.op,
                "dtype": w.dtype or "float32",
                "flops": flops,
                "bytes": nbytes,
                "intensity": arithmetic_intensity(flops, nbytes),
                "time_per_call_s": t,
                "achieved_flops_per_s": flops / t if t > 0 else math.nan,
                "attained_bytes_per_s": nbytes / t if t > 0 else math.nan,
                "bound_s": roof.bound_s(flops, nbytes) if roof is not None else math.nan,
                "above": above(flops, nbytes, t, roof) if roof is not None else math.nan,
                "roof": roof_class(flops, nbytes, t, roof) if roof is not None else None,
                "why": None,
                "imported": figure.source_id is not None,
            }
        )
        ids.append(config_id)
    _explain_above(session, kind.id, rows, ids, roofs)
    table = pd.DataFrame.from_records(rows, columns=CONFIG_COLUMNS)
    return ConfigsRoofline(
        kind_name, dtype, table, spec, measured, known.attained_caches, left_out=left_out
    )


def _explain_above(
    session: Session,
    kind_id: int,
    rows: list[dict[str, Any]],
    ids: list[int],
    roofs: dict[str, Peaks | None],
) -> None:
    """Class again, in place, the rows above every roof by the kernels their result names.

    The kernel names are read for the imported figures among them only; an own figure records
    none and stays ``unexplained`` (``no kernel recorded``).
    """
    lost = [i for i, row in enumerate(rows) if row["roof"] == "unexplained"]
    wanted = [ids[i] for i in lost if rows[i]["imported"]]
    kernels = queries.imported_kernels(session, kind_id, wanted, timing="eager") if wanted else {}
    for i in lost:
        row, roof = rows[i], roofs[rows[i]["dtype"]]
        if roof is None:  # not reached: a classified row has a roof
            continue
        names = kernels.get(ids[i]) if row["imported"] else None
        row["roof"], row["why"] = explain_above(
            row["flops"], row["bytes"], row["time_per_call_s"], roof, names
        )
