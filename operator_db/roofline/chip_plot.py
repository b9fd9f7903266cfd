"""The many-chip roofline: every chip of the peak table for one dtype, with a device's own roofs.

Each chip of ``peaks.yaml`` is one roof (its spec compute peak for the dtype, or the nearest dtype
it has, and its memory bandwidth), coloured by category. A device kind of the database is drawn
over them with its measured roof and its spec roof (scaled to the measuring host's cores for a
CPU, see :class:`~operator_db.roofline.peaks.KindPeaks`), and models may be placed as points
(achieved FLOP/s against arithmetic intensity: :class:`RoofPoint`, which
:func:`operator_db.estimate.rooflines.model_points` makes of stored models). ``opdb chips`` and
the report's "Chips" section draw it; docs/peaks.md explains it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.roofline.attained import AttainedRoof
from operator_db.roofline.bounds import CacheRoof, Peaks, ridge_point
from operator_db.roofline.chips import CATEGORIES, Category, ChipPeaks, load_peak_table
from operator_db.roofline.peaks import dtype_candidates, kind_peaks, peaks_of

if TYPE_CHECKING:
    from matplotlib.axes import Axes

FALLBACK_DTYPES = ("float32", "bfloat16", "float16")
"""Dtypes tried, in order, for a chip without a figure for the asked dtype (TPUs: bfloat16)."""

CATEGORY_LABELS: dict[Category, str] = {
    "server_cpu": "CPU (server socket)",
    "datacenter_gpu": "GPU (datacenter)",
    "consumer_gpu": "GPU (consumer)",
    "asic": "ASIC",
    "soc": "SoC",
}
CATEGORY_COLORMAPS: dict[Category, str] = {
    "server_cpu": "Blues",
    "datacenter_gpu": "Greens",
    "consumer_gpu": "Oranges",
    "asic": "Purples",
    "soc": "RdPu",
}
LINESTYLES = ("-", "--", "-.", ":")
DEVICE_COLORS = (
    "black",
    "tab:red",
    "tab:cyan",
    "tab:olive",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:blue",
    "tab:orange",
    "tab:gray",
)

DEVICES_INSIDE = 4
"""Legend entries of the database's devices kept inside the axes; more go below them."""

INTENSITY_RANGE = (1e-2, 1e4)
"""The x axis, FLOP/byte: below every chip's ridge point on the left, above it on the right."""


@dataclass(frozen=True)
class ChipRoof:
    """One chip's spec roof for a dtype (or the fallback dtype it has)."""

    chip: ChipPeaks
    dtype: str
    """The dtype whose figure is drawn."""
    asked: str
    """The dtype asked for; differs from ``dtype`` after a fallback."""
    peaks: Peaks

    @property
    def label(self) -> str:
        """The chip's name, with the dtype drawn when it is not the one asked for."""
        return self.chip.name + ("" if self.dtype == self.asked else f" [{self.dtype}]")


@dataclass(frozen=True)
class DeviceRoofs:
    """A device kind's own roofs for one dtype: spec (scaled for CPUs) and measured."""

    kind_name: str
    spec: Peaks | None
    measured: Peaks | None
    spec_label: str = "spec"
    """What the spec roof is (``KindPeaks.spec_label``: the chip or closest match, scaling)."""
    attained: tuple[AttainedRoof, ...] = ()
    """The kind's attained cache roofs (a GPU's L2, :mod:`.attained`), applied or not."""

    def attained_lines(self) -> list[str]:
        """Return one line per attained roof: rate, derivation, and whether it is a roof."""
        roof = self.measured or self.spec
        memory = roof.bytes_per_s if roof is not None else None
        return [r.describe(memory) for r in self.attained]


@dataclass(frozen=True)
class RoofPoint:
    """Something measured, placed on the roofline: FLOP/byte and achieved FLOP/s."""

    label: str
    intensity: float
    flops_per_s: float


def chip_roofs(dtype: str = "float32", chips: Sequence[ChipPeaks] | None = None) -> list[ChipRoof]:
    """Return one roof per chip (default: the shipped table) for ``dtype``.

    A chip without a ``dtype`` figure (after the usual fallbacks, ``dtype_candidates``) is drawn
    with the first of ``FALLBACK_DTYPES`` it has, and its label says which.
    """
    out: list[ChipRoof] = []
    for chip in load_peak_table() if chips is None else chips:
        figures = {str(k): v for k, v in chip.peak_flops_per_s.items()}
        order = [*dtype_candidates(dtype), *FALLBACK_DTYPES, *figures]
        used = next(d for d in order if d in figures)
        peaks = Peaks(figures[used], chip.memory_bandwidth_bytes_per_s, f"{chip.name} spec")
        out.append(ChipRoof(chip, used, dtype, peaks))
    return out


def device_roofs(
    session: Session, dtype: str = "float32", kinds: Sequence[str] | None = None
) -> list[DeviceRoofs]:
    """Return the roofs of device kinds of the database for ``dtype``.

    ``kinds`` names them (each must exist; kept if it has either roof); by default every kind
    with measured peaks (``opdb peaks`` ran on such a host) or imported from a data set (its
    ``info`` names the data set: ``opdb import``; drawn with its spec roof). A CPU's spec roof is
    scaled to the cores its measuring hosts recorded, never to the reader's. Each roof carries
    the kind's attained L2 roof where it is faster than the roof's bandwidth.

    Raises:
        NotFoundError: a named kind does not exist.
    """
    sources = set(queries.data_source_names(session).values()) if kinds is None else set()
    out: list[DeviceRoofs] = []
    for kind in queries.device_kinds(session, kinds):
        imported = bool(sources & set(kind.info or {}))
        if kinds is None and not imported and not _has_measured(session, kind.id):
            continue  # neither measured nor imported: not drawn unless named (no L2 query)
        known = kind_peaks(session, kind, kind.name)
        spec = peaks_of(known, dtype, "spec")
        measured = peaks_of(known, dtype, "measured")
        if measured is not None or ((kinds is not None or imported) and spec is not None):
            out.append(
                DeviceRoofs(kind.name, spec, measured, known.spec_label, known.attained_caches)
            )
    return out


def _has_measured(session: Session, kind_id: int) -> bool:
    return any(r.source == "measured" for r in queries.peak_rows(session, kind_id))


def describe_roof(peaks: Peaks | None) -> str:
    """Return ``153.6 GFLOP/s, 9.6 GB/s`` for a roof, or ``none``."""
    if peaks is None:
        return "none"
    return f"{peaks.flops_per_s / 1e9:.4g} GFLOP/s, {peaks.bytes_per_s / 1e9:.4g} GB/s"


def _xs() -> list[float]:
    lo, hi = INTENSITY_RANGE
    return [lo * (hi / lo) ** (i / 300) for i in range(301)]


def _draw(ax: Axes, peaks: Peaks, **style: Any) -> None:
    xs = _xs()
    ax.plot(xs, [peaks.attainable_flops_per_s(x) for x in xs], **style)


def plot_chip_rooflines(
    path: Path,
    *,
    dtype: str = "float32",
    chips: Sequence[ChipPeaks] | None = None,
    devices: Sequence[DeviceRoofs] = (),
    points: Sequence[RoofPoint] = (),
    title: str | None = None,
) -> Path:
    """Draw every chip's roof for ``dtype``, the devices' own roofs and ``points``; save ``path``.

    Log-log axes (FLOP/byte, FLOP/s); chips coloured by category (shades and line styles apart
    within one), the legend outside the axes, grouped by category. Each device is drawn thick: its
    measured roof solid, its spec roof dashed, its cache roofs dotted (a CPU's measured ones, a
    GPU's attained L2, labelled with how it was found), in its own colour, with its ridge point
    marked.
    The suffix of ``path`` picks the format (.png, .svg). Returns ``path``.

    Raises:
        OperatorDBError: matplotlib is not installed.
    """
    from matplotlib import colormaps

    from operator_db.roofline.figure import above_dram, cache_label, new_figure

    roofs = chip_roofs(dtype, chips)
    entries = len(points) + sum(
        len([p for p in (d.measured, d.spec) if p is not None])
        + len({c for p in (d.measured, d.spec) if p is not None for c in p.caches})
        for d in devices
    )
    below = entries > DEVICES_INSIDE
    fig = new_figure(13.5, 7.5 + (0.17 * math.ceil(entries / 2) if below else 0.0))
    ax = fig.add_subplot()
    handles: list[Any] = []
    for category in CATEGORIES:
        members = [r for r in roofs if r.chip.category == category]
        if not members:
            continue
        handles.append(ax.plot([], [], " ", label=f"— {CATEGORY_LABELS[category]} —")[0])
        cmap = colormaps[CATEGORY_COLORMAPS[category]]
        for i, roof in enumerate(members):
            shade = 0.5 + 0.45 * (i / max(len(members) - 1, 1))
            _draw(
                ax,
                roof.peaks,
                color=cmap(shade),
                ls=LINESTYLES[i % len(LINESTYLES)],
                lw=1.4,
                label=roof.label,
            )
            handles.append(ax.get_lines()[-1])
    device_handles: list[Any] = []
    for i, device in enumerate(devices):
        color = DEVICE_COLORS[i % len(DEVICE_COLORS)]
        for peaks, ls, what in ((device.measured, "-", "measured"), (device.spec, "--", "spec")):
            if peaks is None:
                continue
            label = f"{device.kind_name}: " + (
                "measured (opdb peaks)" if what == "measured" else device.spec_label
            )
            _draw(ax, peaks, color=color, ls=ls, lw=3.0, zorder=4, label=label)
            device_handles.append(ax.get_lines()[-1])
            ridge = ridge_point(peaks.flops_per_s, peaks.bytes_per_s)
            ax.plot([ridge], [peaks.flops_per_s], "o", color=color, ms=6, zorder=5)
        drawn: set[CacheRoof] = set()
        drams = [p for p in (device.measured, device.spec) if p is not None]
        for peaks in drams:
            for cache in peaks.caches:
                if cache in drawn or not above_dram(cache, drams):
                    continue
                drawn.add(cache)
                level = Peaks(peaks.flops_per_s, cache.bytes_per_s, cache.level)
                label = f"{device.kind_name}: {cache_label(cache)}"
                _draw(ax, level, color=color, ls=":", lw=2.4, zorder=5, label=label)
                device_handles.append(ax.get_lines()[-1])
    for i, point in enumerate(points):
        ax.scatter(
            [point.intensity],
            [point.flops_per_s],
            marker="*o^sD"[i % 5],
            s=140,
            color=DEVICE_COLORS[i % len(DEVICE_COLORS)],
            edgecolors="white",
            zorder=6,
            label=point.label,
        )
        device_handles.append(ax.collections[-1])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*INTENSITY_RANGE)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel(f"attainable {dtype} performance (FLOP/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)
    ax.set_title(
        title or f"Roofline of {len(roofs)} chips ({dtype}; spec sheets, dense, one chip or socket)"
    )
    if below:  # too many to leave the lines visible: below the axes
        fig.legend(
            handles=device_handles,
            loc="outside lower center",
            ncols=2,
            fontsize=7.5,
            frameon=False,
            title="this database's devices",
            title_fontsize=8,
        )
    elif device_handles:
        ax.legend(
            handles=device_handles,
            loc="lower right",
            fontsize=8,
            framealpha=0.92,
            title="this database's devices",
            title_fontsize=8,
        )
    fig.legend(
        handles=handles,
        loc="outside right upper",
        fontsize=7.5,
        frameon=False,
        title=f"chips (spec, {dtype}; [dtype]: fallback)",
        title_fontsize=8,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
