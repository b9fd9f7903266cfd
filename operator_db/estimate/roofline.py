"""The roofline: one bound for every caller, the table of a model against it, and the plot.

The roofline bound of a configuration is max(FLOPs / peak FLOP/s, bytes / peak bandwidth)
(METHODOLOGY §5): no implementation can beat it. :func:`roofline_time_s` is that formula and
:class:`Peaks` the roof it is drawn from; composition, significance ranking, the table and the
plot all use them. Achieved FLOP/s is FLOPs / measured time; arithmetic intensity is FLOPs /
compulsory bytes — or, where Nsight Compute counted them (``opdb ncu import``, docs/ncu.md), the
measured FP FLOPs and DRAM bytes of a configuration, which the table's ``source`` column names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from operator_db.errors import ConfigurationError, NotFoundError, OperatorDBError
from operator_db.estimate.chips import ChipPeaks, find_chip

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

    from operator_db.db.queries import CounterFigures
    from operator_db.estimate.compose import Estimate

BoundType = Literal["memory", "compute"]

ROOFLINE_COLUMNS = [
    "op",
    "inputs",
    "count",
    "flops",
    "bytes",
    "source",
    "intensity",
    "time_per_call_s",
    "achieved_flops_per_s",
    "roofline_spec_s",
    "roofline_measured_s",
    "bound",
    "efficiency",
    "time_share",
]


def _check_work(flops: float, nbytes: float) -> None:
    if flops < 0 or nbytes < 0 or math.isnan(flops) or math.isnan(nbytes):
        raise ValueError(f"flops and bytes must be >= 0, got {flops!r} and {nbytes!r}")


def _check_peaks(peak_flops_per_s: float, peak_bytes_per_s: float) -> None:
    if not (peak_flops_per_s > 0 and peak_bytes_per_s > 0):
        raise ValueError(
            f"peaks must be > 0, got {peak_flops_per_s!r} FLOP/s and {peak_bytes_per_s!r} B/s"
        )


def _times_s(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> tuple[float, float]:
    """Return (compute time, memory time) in s at the peaks, after checking the arguments."""
    _check_work(flops, nbytes)
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return flops / peak_flops_per_s, nbytes / peak_bytes_per_s


def roofline_time_s(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> float:
    """Return the roofline lower bound on run time, s: max(flops / peak FLOP/s, bytes / peak B/s).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    return max(_times_s(flops, nbytes, peak_flops_per_s, peak_bytes_per_s))


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """Return FLOPs per byte moved: ``inf`` when no bytes move but FLOPs run, 0 when neither.

    Raises:
        ValueError: negative work.
    """
    _check_work(flops, nbytes)
    if nbytes == 0:
        return math.inf if flops > 0 else 0.0
    return flops / nbytes


def ridge_point(peak_flops_per_s: float, peak_bytes_per_s: float) -> float:
    """Return the ridge point, FLOP/byte: the intensity above which an op is compute-bound.

    Raises:
        ValueError: non-positive peaks.
    """
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return peak_flops_per_s / peak_bytes_per_s


def bound_type(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> BoundType:
    """Return ``"compute"`` when the FLOP time exceeds the byte time, else ``"memory"`` (ties too).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    compute_s, memory_s = _times_s(flops, nbytes, peak_flops_per_s, peak_bytes_per_s)
    return "compute" if compute_s > memory_s else "memory"


@dataclass(frozen=True)
class Peaks:
    """The roof of a device for one dtype: its compute peak and its memory bandwidth."""

    flops_per_s: float
    """Peak FLOP/s (int8: OP/s) for the dtype."""
    bytes_per_s: float
    """Peak memory bandwidth, bytes/s."""
    source: str = "spec"
    """Where the two figures come from (spec sheet, measured, or a mix), for display."""

    def bound_s(self, flops: float | None, nbytes: float | None) -> float:
        """Return the roofline bound of ``flops`` FLOPs moving ``nbytes`` bytes, in s (None: 0).

        Raises:
            ValueError: negative work or non-positive peaks.
        """
        return roofline_time_s(flops or 0, nbytes or 0, self.flops_per_s, self.bytes_per_s)

    def bound_type(self, flops: float | None, nbytes: float | None) -> BoundType:
        """Return which roof limits the work: ``compute`` or ``memory`` (ties too; None: 0)."""
        return bound_type(flops or 0, nbytes or 0, self.flops_per_s, self.bytes_per_s)

    def attainable_flops_per_s(self, intensity: float) -> float:
        """Return the roof at ``intensity`` FLOP/byte: min(peak FLOP/s, intensity × bandwidth)."""
        return min(self.flops_per_s, intensity * self.bytes_per_s)


def roofline_table(
    est: Estimate,
    spec: Peaks | None,
    measured: Peaks | None,
    counters: Mapping[str, CounterFigures] | None = None,
) -> pd.DataFrame:
    """Return one row per measurable configuration, then a row ``(model)`` for the whole model.

    Times in s, FLOP/s, bytes; ``bound`` says which roof limits the configuration ("memory" or
    "compute", by the measured peaks where known); ``efficiency`` = roofline bound / measured time.
    ``counters`` (by configuration key) replace the spec's FLOPs and bytes by measured ones where
    they hold them (:func:`~operator_db.estimate.counters.roofline_work`); ``source`` says which
    a row uses (``spec``, ``ncu``, ``ncu bytes``, ``ncu FLOPs``); the model's row sums the rows.
    """
    import pandas as pd  # here, not at the top: `opdb estimate` needs Peaks, not tables

    from operator_db.estimate.counters import roofline_work

    reference = measured or spec
    rows: list[dict[str, Any]] = []
    cfgs = est.configs[est.configs["form"] != "opaque"]
    for r in cfgs.itertuples():
        flops, nbytes, source = roofline_work(
            float(r.flops or 0), float(r.bytes or 0), (counters or {}).get(str(r.key))
        )
        t = r.time_per_call_s if r.measured else None
        bound_ref = None if reference is None else reference.bound_s(flops, nbytes)
        bound = None if reference is None else reference.bound_type(flops, nbytes)
        rows.append(
            {
                "op": r.op,
                "inputs": r.inputs,
                "count": r.count,
                "flops": flops,
                "bytes": nbytes,
                "source": source,
                "intensity": arithmetic_intensity(flops, nbytes),
                "time_per_call_s": t,
                "achieved_flops_per_s": flops / t if t else None,
                "roofline_spec_s": None if spec is None else spec.bound_s(flops, nbytes),
                "roofline_measured_s": (
                    None if measured is None else measured.bound_s(flops, nbytes)
                ),
                "bound": bound,
                "efficiency": bound_ref / t if t and bound_ref is not None else None,
                "time_share": r.time_share,
            }
        )
    total_flops = math.fsum(r["count"] * r["flops"] for r in rows)
    total_bytes = math.fsum(r["count"] * r["bytes"] for r in rows)
    sources = {r["source"] for r in rows}
    spec_total = sum(r["count"] * r["roofline_spec_s"] for r in rows) if spec else None
    meas_total = sum(r["count"] * r["roofline_measured_s"] for r in rows) if measured else None
    model_time = est.full_run_time_s or (est.time_s if est.coverage == 1.0 else None)
    ref_total = meas_total if measured else spec_total
    rows.append(
        {
            "op": "(model)",
            "inputs": "",
            "count": 1,
            "flops": total_flops,
            "bytes": total_bytes,
            "source": sources.pop() if len(sources) == 1 else "mixed",
            "intensity": arithmetic_intensity(total_flops, total_bytes),
            "time_per_call_s": model_time,
            "achieved_flops_per_s": total_flops / model_time if model_time else None,
            "roofline_spec_s": spec_total,
            "roofline_measured_s": meas_total,
            "bound": None,
            "efficiency": ref_total / model_time if model_time and ref_total else None,
            "time_share": 1.0,
        }
    )
    return pd.DataFrame.from_records(rows, columns=ROOFLINE_COLUMNS)


def roof_intensities(lo: float, hi: float, points: int = 201) -> list[float]:
    """Return ``points`` intensities (FLOP/byte) evenly spaced on a log axis, ``lo`` to ``hi``."""
    return [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]


def draw_roof(ax: Any, peaks: Peaks, xs: Sequence[float], **style: Any) -> None:
    """Draw the roof min(peak, intensity × bandwidth) of ``peaks`` over intensities ``xs``."""
    ys = [peaks.attainable_flops_per_s(x) for x in xs]
    ax.plot(xs, ys, **style)


def draw_roofs(ax: Any, xs: Sequence[float], *, spec: Peaks | None, measured: Peaks | None) -> None:
    """Draw a kind's spec roof (solid) and measured roof (dashed), each labelled by its source."""
    if spec is not None:
        draw_roof(ax, spec, xs, color="black", lw=2, label=f"roof, {spec.source}")
    if measured is not None:
        draw_roof(ax, measured, xs, color="black", lw=2, ls="--", label=f"roof, {measured.source}")


def plot_roofline(
    est: Estimate,
    table: pd.DataFrame,
    path: Path,
    *,
    spec: Peaks | None,
    measured: Peaks | None,
    chips: Sequence[str] = (),
    dtype: str = "float32",
) -> Path:
    """Draw the device's roofs, one point per measured configuration and the model; save a PNG.

    Points are sized by their share of the model's time and coloured by operator type (the eight
    largest; the rest grey). ``chips`` overlays the roofs of chips of the shipped peak table.

    Raises:
        OperatorDBError: matplotlib is missing, or nothing is measured to plot.
        ConfigurationError: a chip name matches no chip of the table.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OperatorDBError("plots need matplotlib: pip install 'operator-db[plot]'") from None
    points = table[(table["op"] != "(model)") & table["achieved_flops_per_s"].notna()]
    points = points[(points["flops"] > 0) & (points["bytes"] > 0)]
    if points.empty:
        raise NotFoundError(
            f"nothing to plot: no measured configuration of {est.model} with FLOPs on "
            f"{est.device_kind} (run `opdb measure` or a worker first)"
        )
    overlay: list[ChipPeaks] = []
    for name in chips:
        chip = find_chip(name)
        if chip is None:
            raise ConfigurationError(
                f"no chip {name!r} in the peak table (see `opdb peaks --list`)"
            )
        overlay.append(chip)
    lo = max(min(points["intensity"].min() / 4, 0.01), 1e-3)
    hi = max(points["intensity"].max() * 4, 1e3)
    xs = roof_intensities(lo, hi)
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=120)
    draw_roofs(ax, xs, spec=spec, measured=measured)
    for chip in overlay:
        by_dtype: dict[str, float] = {str(k): v for k, v in chip.peak_flops_per_s.items()}
        flops = by_dtype.get(dtype) or max(by_dtype.values())
        peaks = Peaks(flops, chip.memory_bandwidth_bytes_per_s, chip.name)
        draw_roof(ax, peaks, xs, lw=1, alpha=0.6, label=f"{chip.name} ({dtype} spec)")
    by_share = points.groupby("op")["time_share"].sum().sort_values(ascending=False)
    top = list(by_share.index[:8])
    cmap = plt.get_cmap("tab10")
    for i, op in enumerate([*top, "other"]):
        sel = points[points["op"].isin(top) == (op != "other")]
        sel = sel[sel["op"] == op] if op != "other" else sel
        if sel.empty:
            continue
        sizes = 15 + 600 * sel["time_share"].fillna(0).clip(lower=0)
        ax.scatter(
            sel["intensity"],
            sel["achieved_flops_per_s"],
            s=sizes,
            alpha=0.6,
            color=cmap(i) if op != "other" else "grey",
            edgecolors="white",
            linewidths=0.5,
            label=op.removeprefix("torch.nn.functional.").removeprefix("torch.nn.")
            + f" ({sel['time_share'].sum():.0%} of time)",
        )
    model = table[table["op"] == "(model)"].iloc[0]
    if model["achieved_flops_per_s"] and model["bytes"]:
        ax.scatter(
            [model["intensity"]],
            [model["achieved_flops_per_s"]],
            marker="*",
            s=350,
            color="red",
            edgecolors="black",
            zorder=5,
            label="whole model",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    measured_work = bool((points["source"] != "spec").any())
    traffic = (
        "compulsory traffic; DRAM traffic where ncu measured it"
        if measured_work
        else ("compulsory traffic")
    )
    ax.set_xlabel(f"arithmetic intensity (FLOP / byte, {traffic})")
    ax.set_ylabel("achieved performance (FLOP/s)")
    ax.set_title(
        f"Roofline: {est.model} ({est.mode}) on {est.device_kind}\n"
        f"{len(points)} configurations; marker area ∝ share of the model's time"
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right", framealpha=0.9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
