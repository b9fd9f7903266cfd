"""A model against the roofs: its table (one row per configuration, then the model) and plot.

Achieved FLOP/s is FLOPs / measured time; arithmetic intensity is FLOPs / compulsory bytes — or,
where Nsight Compute counted them (``opdb ncu import``, docs/ncu.md), the measured FP FLOPs and
DRAM bytes of a configuration, which the table's ``source`` column names. Both take the model's
costs as plain figures (:class:`ModelCosts`: an estimate is one), not how they were composed.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from operator_db.errors import ConfigurationError, NotFoundError, OperatorDBError
from operator_db.roofline.bounds import Peaks, arithmetic_intensity
from operator_db.roofline.chips import ChipPeaks, find_chip
from operator_db.roofline.explain import count_classes
from operator_db.roofline.figure import draw_roof, draw_roofs, mark_classes, roof_intensities

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pandas as pd

    from operator_db.db.queries import CounterFigures


class ModelCosts(Protocol):
    """What the roofline reads of a model's costs on a kind (an estimate holds all of it)."""

    @property
    def model(self) -> str:
        """The model's name."""

    @property
    def device_kind(self) -> str:
        """The device kind's name."""

    @property
    def mode(self) -> str:
        """``inference`` or ``training``."""

    @property
    def time_s(self) -> float:
        """Σ count × per-call time of the measured configurations, in s."""

    @property
    def coverage(self) -> float:
        """Share of the model's calls that are measured (0–1)."""

    @property
    def full_run_time_s(self) -> float | None:
        """The measured whole model, in s (None: not measured)."""

    @property
    def configs(self) -> pd.DataFrame:
        """One row per configuration (key, op, form, inputs, count, flops, bytes, measured, ...).

        ``time_per_call_s`` in s; ``time_share`` of the model's time.
        """


TITLE_CHARS = 110
"""The roofline figure's subtitle is wrapped at this many characters (10 in at 10 pt)."""
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
    "roof",
]


def roofline_table(
    est: ModelCosts,
    spec: Peaks | None,
    measured: Peaks | None,
    counters: Mapping[str, CounterFigures] | None = None,
) -> pd.DataFrame:
    """Return one row per measurable configuration, then a row ``(model)`` for the whole model.

    Times in s, FLOP/s, bytes; ``bound`` says which roof limits the configuration ("memory" or
    "compute", by the measured peaks where known); ``efficiency`` = roofline bound / measured time;
    ``roof`` which roof explains a measured configuration (``memory``, ``cache``, ``compute``, or
    ``unexplained``: above every roof; :func:`~operator_db.roofline.explain.roof_class`).
    ``counters`` (by configuration key) replace the spec's FLOPs and bytes by measured ones where
    they hold them (:func:`~operator_db.roofline.counters.roofline_work`); ``source`` says which
    a row uses (``spec``, ``ncu``, ``ncu bytes``, ``ncu FLOPs``); the model's row sums the rows.
    """
    import pandas as pd  # here, not at the top: `opdb estimate` needs Peaks, not tables

    from operator_db.roofline.counters import roofline_work
    from operator_db.roofline.explain import roof_class

    reference = measured or spec
    rows: list[dict[str, Any]] = []
    cfgs = est.configs[est.configs["form"] != "opaque"]
    for r in cfgs.itertuples():
        spec_flops, spec_bytes = _known(r.flops), _known(r.bytes)
        counted = (counters or {}).get(str(r.key))
        flops, nbytes, source = roofline_work(spec_flops or 0.0, spec_bytes or 0.0, counted)
        if (source not in ("ncu", "ncu FLOPs") and spec_flops is None) or (
            source not in ("ncu", "ncu bytes") and spec_bytes is None
        ):
            rows.append(_without_work(r, source))
            continue
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
                "roof": (
                    None if reference is None or not t else roof_class(flops, nbytes, t, reference)
                ),
            }
        )
    # The model's work is known only where every configuration's is: a sum without some would
    # understate it (its point and bound are then left out, as the configurations' are).
    whole = all(r["flops"] is not None for r in rows)
    total_flops = math.fsum(r["count"] * r["flops"] for r in rows) if whole else None
    total_bytes = math.fsum(r["count"] * r["bytes"] for r in rows) if whole else None
    sources = {r["source"] for r in rows}
    spec_total = sum(r["count"] * r["roofline_spec_s"] for r in rows) if spec and whole else None
    meas_total = (
        sum(r["count"] * r["roofline_measured_s"] for r in rows) if measured and whole else None
    )
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
            "intensity": (
                None
                if total_flops is None or total_bytes is None
                else arithmetic_intensity(total_flops, total_bytes)
            ),
            "time_per_call_s": model_time,
            "achieved_flops_per_s": (
                total_flops / model_time if model_time and total_flops is not None else None
            ),
            "roofline_spec_s": spec_total,
            "roofline_measured_s": meas_total,
            "bound": None,
            "efficiency": ref_total / model_time if model_time and ref_total else None,
            "time_share": 1.0,
            "roof": None,
        }
    )
    return pd.DataFrame.from_records(rows, columns=ROOFLINE_COLUMNS)


def _known(value: Any) -> float | None:
    """Return a spec's FLOPs or bytes as a float; None where the spec gives none (None, NaN)."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _without_work(r: Any, source: str) -> dict[str, Any]:
    """Return the row of a configuration whose FLOPs or bytes are unknown: no point, no bound."""
    return {
        "op": r.op,
        "inputs": r.inputs,
        "count": r.count,
        "flops": None,
        "bytes": None,
        "source": source,
        "intensity": None,
        "time_per_call_s": r.time_per_call_s if r.measured else None,
        "achieved_flops_per_s": None,
        "roofline_spec_s": None,
        "roofline_measured_s": None,
        "bound": None,
        "efficiency": None,
        "time_share": r.time_share,
        "roof": None,
    }


def without_work(table: pd.DataFrame) -> int:
    """Return how many configurations of a roofline table have no FLOPs or bytes (not drawn)."""
    configs = table[table["op"] != "(model)"]
    return int((configs["flops"].isna() | configs["bytes"].isna()).sum())


def plot_roofline(
    est: ModelCosts,
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
    largest; the rest grey); those a cache roof explains are ringed and those above every roof
    crossed (the table's ``roof``), and the title counts each. ``chips`` overlays the roofs of
    chips of the shipped peak table.

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
    import pandas as pd

    configs = table[table["op"] != "(model)"]
    if not configs["time_per_call_s"].notna().any():
        raise NotFoundError(
            f"nothing measured on {est.device_kind}: no configuration of {est.model} "
            "(run `opdb measure` or a worker first)"
        )
    points = configs[configs["achieved_flops_per_s"].notna()]
    points = points[(points["flops"] > 0) & (points["bytes"] > 0)]
    left_out = without_work(table)
    if points.empty:
        raise NotFoundError(
            f"nothing to plot: no measured configuration of {est.model} on {est.device_kind} "
            f"has FLOPs and bytes ({left_out} configurations without FLOPs/bytes left out)"
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
    reference = measured or spec
    counts = count_classes(points["roof"], points["efficiency"])  # efficiency: bound / time
    mark_classes(
        ax,
        list(points["intensity"]),
        list(points["achieved_flops_per_s"]),
        list(points["roof"]),
        reference,
        counts,
    )
    model = table[table["op"] == "(model)"].iloc[0]
    achieved, nbytes = model["achieved_flops_per_s"], model["bytes"]
    if pd.notna(achieved) and pd.notna(nbytes) and achieved and nbytes:
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
    subtitle = (
        f"{len(points)} configurations ({counts.describe(reference)}); "
        + (f"{left_out} configurations without FLOPs/bytes left out; " if left_out else "")
        + "marker area ∝ share of the model's time"
    )
    ax.set_title(  # wrapped to the figure's width: a long subtitle was clipped
        f"Roofline: {est.model} ({est.mode}) on {est.device_kind}\n"
        + textwrap.fill(subtitle, width=TITLE_CHARS),
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right", framealpha=0.9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
