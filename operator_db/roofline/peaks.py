"""What is known of a device kind's peaks (spec sheet and measured); storing them is :mod:`.record`.

Spec peaks come from the database or, where none are stored, from the shipped table
(:mod:`operator_db.roofline.chips`); measured ones from ``opdb peaks``
(:func:`operator_db.measure.peaks.measure_peaks`). :class:`KindPeaks` holds both for a kind;
:func:`best_peaks` and :func:`peaks_of` pick the :class:`~operator_db.roofline.bounds.Peaks` a
roofline is drawn from. Storage goes through :mod:`operator_db.db.queries.peaks`; docs/peaks.md
says how measured peaks are taken.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, DevicePeak
from operator_db.roofline.attained import AttainedRoof, with_attained
from operator_db.roofline.bounds import CacheRoof, Peaks
from operator_db.roofline.chips import (
    ChipMatch,
    MatchKind,
    match_chip,
    scaled_to_cores,
    spec_reference,
)

if TYPE_CHECKING:  # measure imports torch; estimating needs none of it
    pass

PeakSource = Literal["spec", "measured"]
BANDWIDTH = "bandwidth"
"""The key of the memory-bandwidth peak in ``KindPeaks.measured_references``."""
SPEC_CHIP = "spec_chip"
"""The key of ``device_kinds.info`` naming the chip whose spec rows are stored, how the kind's
name matched it and its cores (CPUs)."""
CPU_ALLOTMENT = "cpu_allotment"
"""The key of ``hosts.info`` holding the cores a CPU host's process may use
(``devices.allotment.CpuAllotment.as_dict()``, recorded by the worker and ``opdb peaks``)."""

# Other names of one rate class, tried in order after the dtype itself (see ``dtype_candidates``).
_FLOAT8_FAMILY = {
    "float8_e5m2": "float8_e4m3fn",
    "float8_e5m2fnuz": "float8_e4m3fnuz",
}


def dtype_candidates(dtype: str, *, allow_tf32: bool = False) -> tuple[str, ...]:
    """Return the peak dtypes to try, in order, for a computation in ``dtype``.

    ``torch.`` prefixes are dropped. ``float32`` is ``tf32`` first when ``allow_tf32`` (PyTorch's
    ``allow_tf32`` / ``float32_matmul_precision("high")``), then ``float32``; ``tf32`` falls back
    to ``float32`` (a chip without TF32 units runs it as FP32); an FP8 format falls back to its
    sibling of the same rate. Nothing else falls back: bfloat16 on a chip without it (V100, T4)
    is not float16-fast, and a missing float64 is not the float32 rate.
    """
    name = dtype.removeprefix("torch.")
    if name == "float32":
        return ("tf32", "float32") if allow_tf32 else ("float32",)
    if name == "tf32":
        return ("tf32", "float32")
    if name in _FLOAT8_FAMILY:
        return (name, _FLOAT8_FAMILY[name])
    return (name,)


@dataclass(frozen=True)
class Peak:
    """One peak figure and where it came from."""

    value: float
    """FLOP/s (int8: OP/s) for compute, bytes/s for bandwidth."""
    source: PeakSource
    dtype: str | None
    """The dtype whose figure this is (after fallback); None for bandwidth."""
    reference: str | None = None


@dataclass(frozen=True)
class KindPeaks:
    """The best-known spec and measured peaks of one device kind.

    Spec peaks come from the database or, where none are stored, from the shipped table
    (``spec_origin``). Measured peaks are the best over stored measurements (every host of the
    kind): the attainable peak is the most any run reached.

    ``spec_flops_per_s`` and ``spec_bytes_per_s`` are the whole chip's figures. For a CPU whose
    hosts recorded how many cores their process may use, :meth:`flops_per_s`, :meth:`bytes_per_s`
    and :meth:`rows` give them scaled to those cores: FLOP/s by ``spec_flops_scale`` (usable /
    chip cores, at the boost clock), bandwidth by ``spec_bytes_scale`` (the socket's whole
    bandwidth; docs/peaks.md).
    """

    kind_name: str
    spec_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    """The chip's dense peaks per dtype, FLOP/s, unscaled."""
    spec_bytes_per_s: float | None = None
    """The chip's memory bandwidth, bytes/s, unscaled."""
    spec_reference: str | None = None
    spec_origin: Literal["db", "table"] | None = None
    measured_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    measured_bytes_per_s: float | None = None
    measured_references: Mapping[str, str] = field(default_factory=dict)
    """How each measured peak was taken, by dtype (``BANDWIDTH`` for the copy)."""
    measured_caches: tuple[CacheRoof, ...] = ()
    """A CPU's cache levels measured by ``opdb peaks``, the best of each level, L2 first."""
    attained_caches: tuple[AttainedRoof, ...] = ()
    """A GPU's L2 roof attained by its L2-resident configurations (no spec sheet gives one;
    :mod:`.attained`): added to a roof it is faster than (:func:`peaks_of`)."""
    spec_chip: str | None = None
    """The table chip the spec figures are, when known."""
    spec_match: MatchKind | None = None
    """How the kind's name matched ``spec_chip`` (``partial``: a closest match, not the chip)."""
    chip_cores: int | None = None
    """Cores per socket of ``spec_chip`` (CPUs)."""
    usable_cores: float | None = None
    """Cores a process of this kind may use, as recorded by its hosts (the most of any host)."""
    usable_cores_seen: tuple[float, ...] = ()
    """Every distinct allotment the kind's hosts recorded, ascending."""
    chip_boost: float | None = None
    """Max boost / base clock of ``spec_chip`` (CPUs): applied to the FLOP/s of a roof scaled to
    fewer cores than the chip's, whose few busy cores may boost."""

    def has_measured(self, dtypes: Sequence[str]) -> bool:
        """Whether the kind has a measured matmul peak for each of ``dtypes`` and a bandwidth.

        What ``opdb peaks`` stores, and a study's or the demo's roofline needs.
        """
        return self.measured_bytes_per_s is not None and all(
            dtype in self.measured_flops_per_s for dtype in dtypes
        )

    @property
    def spec_scale(self) -> float:
        """Return usable / chip cores for a CPU with a recorded allotment, else 1.

        ``spec_flops_scale`` and ``spec_bytes_scale`` are what the spec figures are scaled by.
        """
        if self.chip_cores is None or self.usable_cores is None:
            return 1.0
        return scaled_to_cores(1.0, self.chip_cores, self.usable_cores)

    @property
    def spec_bytes_scale(self) -> float:
        """Return the spec bandwidth's factor: 1 on one socket's cores or fewer, else spec_scale.

        A few cores can draw far more than their fair share of a socket's memory channels (one
        core's bandwidth is set by the cache misses it keeps in flight, not by the channels; no
        vendor publishes that figure), so the socket's bandwidth is the bound that holds for any
        allotment of one socket; more cores than one socket has (two sockets) scale above it.
        """
        return max(1.0, self.spec_scale)

    @property
    def spec_flops_scale(self) -> float:
        """The factor applied to spec FLOP/s: ``spec_scale``, × the boost ratio on fewer cores."""
        boosted = (
            self.chip_boost is not None
            and self.chip_cores is not None
            and self.usable_cores is not None
            and self.usable_cores < self.chip_cores
        )
        return self.spec_scale * (self.chip_boost or 1.0 if boosted else 1.0)

    @property
    def spec_label(self) -> str:
        """What the spec roof is, e.g. ``AMD EPYC 9654 (Genoa) spec, scaled to 2 of 96 cores``.

        A partial match reads ``closest spec-sheet match: <chip>``; a CPU with no recorded
        allotment says the roof is the whole chip's.
        """
        if self.spec_chip is None:
            label = "spec"
        elif self.spec_match == "partial":
            label = f"closest spec-sheet match: {self.spec_chip}"
        else:
            label = f"{self.spec_chip} spec"
        if self.chip_cores is not None:
            if self.usable_cores is None:
                label += f", whole chip ({self.chip_cores} cores; no allotment recorded)"
            else:
                label += f", scaled to {self.usable_cores:g} of {self.chip_cores} cores"
                if self.spec_flops_scale != self.spec_scale:
                    label += " at the boost clock"
                if self.spec_bytes_scale != self.spec_scale:
                    label += ", the socket's bandwidth"
        return label

    @property
    def empty(self) -> bool:
        """True when nothing at all is known."""
        return not (
            self.spec_flops_per_s
            or self.spec_bytes_per_s
            or self.measured_flops_per_s
            or self.measured_bytes_per_s
        )

    def flops_per_s(
        self, dtype: str, *, prefer: PeakSource = "measured", allow_tf32: bool = False
    ) -> Peak | None:
        """Return the compute peak for ``dtype``, or None when neither source has one.

        Candidates from ``dtype_candidates`` are tried in order; for each, the ``prefer`` source
        first, then the other. So ``tf32`` takes a spec TF32 figure over a measured FP32 one.
        """
        order: tuple[PeakSource, PeakSource] = (
            ("measured", "spec") if prefer == "measured" else ("spec", "measured")
        )
        for candidate in dtype_candidates(dtype, allow_tf32=allow_tf32):
            for source in order:
                table = self.measured_flops_per_s if source == "measured" else self.spec_flops_per_s
                value = table.get(candidate)
                if value is not None:
                    scale = self.spec_flops_scale if source == "spec" else 1.0
                    return Peak(
                        value * scale, source, candidate, self._reference(source, candidate)
                    )
        return None

    def bytes_per_s(self, *, prefer: PeakSource = "measured") -> Peak | None:
        """Return the memory-bandwidth peak, the ``prefer`` source first; None if neither."""
        order: tuple[PeakSource, PeakSource] = (
            ("measured", "spec") if prefer == "measured" else ("spec", "measured")
        )
        for source in order:
            value = self.measured_bytes_per_s if source == "measured" else self.spec_bytes_per_s
            if value is not None:
                scale = self.spec_bytes_scale if source == "spec" else 1.0
                return Peak(value * scale, source, None, self._reference(source, BANDWIDTH))
        return None

    def _reference(self, source: PeakSource, key: str) -> str | None:
        return self.measured_references.get(key) if source == "measured" else self.spec_reference

    def rows(self) -> list[dict[str, Any]]:
        """Return one row per dtype, then bandwidth, then each cache level: spec, measured, ratio.

        ``spec`` is scaled (``spec_flops_scale``, ``spec_bytes_scale``: what ``measured`` is
        compared with); ``spec_chip`` is the whole chip's figure.
        """
        dtypes = list(dict.fromkeys([*self.spec_flops_per_s, *self.measured_flops_per_s]))
        out: list[dict[str, Any]] = []
        for dtype in dtypes:
            spec = self.spec_flops_per_s.get(dtype)
            measured = self.measured_flops_per_s.get(dtype)
            out.append(_row("flops_per_s", dtype, spec, measured, self.spec_flops_scale))
        if self.spec_bytes_per_s is not None or self.measured_bytes_per_s is not None:
            out.append(
                _row(
                    "bytes_per_s",
                    None,
                    self.spec_bytes_per_s,
                    self.measured_bytes_per_s,
                    self.spec_bytes_scale,
                )
            )
        for cache in self.measured_caches:  # no spec sheet gives a cache's bandwidth
            row = _row("bytes_per_s", None, None, cache.bytes_per_s, 1.0)
            out.append({**row, "level": cache.level, "capacity_bytes": cache.capacity_bytes})
        return out


def _row(
    quantity: str, dtype: str | None, chip: float | None, measured: float | None, scale: float
) -> dict[str, Any]:
    spec = None if chip is None else chip * scale
    fraction = measured / spec if spec and measured is not None else None
    return {
        "quantity": quantity,
        "dtype": dtype,
        "level": None,
        "capacity_bytes": None,
        "spec": spec,
        "spec_chip": chip,
        "measured": measured,
        "fraction_of_spec": fraction,
    }


def peaks_of(kind: KindPeaks, dtype: str, source: PeakSource) -> Peaks | None:
    """Return ``source``'s compute peak for ``dtype`` and bandwidth as :class:`Peaks`, if both."""
    flops = kind.flops_per_s(dtype, prefer=source)
    bw = kind.bytes_per_s(prefer=source)
    if flops is None or bw is None or flops.source != source or bw.source != source:
        return None
    what = kind.spec_label if source == "spec" else "measured"
    caches = kind.measured_caches if source == "measured" else ()
    label = f"{what}: {flops.dtype} peak and bandwidth" + (
        f", {' and '.join(c.level for c in caches)} roofs" if caches else ""
    )
    return with_attained(
        Peaks(flops.value, bw.value, source=label, caches=caches), kind.attained_caches
    )


def best_peaks(kind: KindPeaks, dtype: str) -> Peaks | None:
    """Measured peaks if both are known, else spec-sheet ones, else a mix, else None."""
    sources: tuple[PeakSource, ...] = ("measured", "spec")
    for source in sources:
        found = peaks_of(kind, dtype, source)
        if found is not None:
            return found
    flops = kind.flops_per_s(dtype)
    bw = kind.bytes_per_s()
    if flops is None or bw is None:
        return None
    label = {"measured": "measured", "spec": kind.spec_label}
    caches = kind.measured_caches if bw.source == "measured" else ()
    mixed = Peaks(
        flops.value,
        bw.value,
        source=f"{label[flops.source]} FLOP/s, {label[bw.source]} bandwidth",
        caches=caches,
    )
    return with_attained(mixed, kind.attained_caches)


def spec_peaks_for(kind_name: str, *, usable_cores: float | None = None) -> KindPeaks | None:
    """Return the shipped table's peaks for a device kind (no database), or None if unknown.

    ``usable_cores`` (a CPU's allotment, e.g. this host's) scales the spec roof of a CPU chip.
    """
    found = match_chip(kind_name)
    if found is None:
        return None
    chip = found.chip
    return KindPeaks(
        kind_name=kind_name,
        spec_flops_per_s={str(k): v for k, v in chip.peak_flops_per_s.items()},
        spec_bytes_per_s=chip.memory_bandwidth_bytes_per_s,
        spec_reference=spec_reference(chip, found.how),
        spec_origin="table",
        **_chip_fields(found, usable_cores),
    )


def _chip_fields(found: ChipMatch, usable_cores: float | None) -> dict[str, Any]:
    return {
        "spec_chip": found.chip.name,
        "spec_match": found.how,
        "chip_cores": found.chip.cores,
        "chip_boost": found.chip.boost_clock_ratio,
        "usable_cores": usable_cores if found.chip.cores is not None else None,
    }


def peaks_for_kind(session: Session, kind_name: str) -> KindPeaks:
    """Return the best-known spec and measured peaks of a device kind.

    Spec: the stored spec rows, or (none stored) the shipped table's chip matching ``kind_name``.
    Measured: per dtype, and for bandwidth, the highest stored value over all hosts. A GPU's L2
    roof attained by its configurations, as stored (``record.store_attained_roofs``: an import
    or ``opdb peaks`` finds it once, not every read).
    An unknown kind with no matching chip gives an empty ``KindPeaks``.
    """
    return kind_peaks(session, queries.find_device_kind(session, kind_name), kind_name)


def kind_peaks(session: Session, kind: DeviceKind | None, kind_name: str) -> KindPeaks:
    """:func:`peaks_for_kind` of a kind already read (None: not stored, the table only).

    The usable cores of a CPU kind are the most any of its hosts recorded (``CPU_ALLOTMENT`` in
    ``hosts.info``): like the measured peaks, the best of the kind. They are read from the
    database, never from the machine reading it.
    """
    rows = queries.peak_rows(session, kind.id) if kind is not None else []
    spec = [r for r in rows if r.source == "spec"]
    measured_flops: dict[str, float] = {}
    measured_bw: float | None = None
    caches: dict[str, CacheRoof] = {}
    references: dict[str, str] = {}
    for r in rows:
        if r.source != "measured":
            continue
        if r.level is not None:
            if r.bytes_per_s is None or r.capacity_bytes is None:
                continue
            best = caches.get(r.level)
            if best is None or r.bytes_per_s > best.bytes_per_s:
                caches[r.level] = CacheRoof(r.level, r.capacity_bytes, r.bytes_per_s)
        elif r.dtype is not None and r.flops_per_s is not None:
            if r.flops_per_s > measured_flops.get(r.dtype, -math.inf):
                measured_flops[r.dtype] = r.flops_per_s
                references[r.dtype] = r.reference or ""
        elif (
            r.dtype is None
            and r.bytes_per_s is not None
            and (measured_bw is None or r.bytes_per_s > measured_bw)
        ):
            measured_bw = r.bytes_per_s
            references[BANDWIDTH] = r.reference or ""
    seen = _usable_cores_seen(session, kind)
    peaks = KindPeaks(
        kind_name=kind_name,
        measured_flops_per_s=measured_flops,
        measured_bytes_per_s=measured_bw,
        measured_references=references,
        measured_caches=tuple(caches[level] for level in sorted(caches)),
        usable_cores_seen=seen,
    )
    usable = seen[-1] if seen else None
    known = _with_spec(peaks, kind, kind_name, spec, usable)
    attained = tuple(
        AttainedRoof.from_dict(json.loads(r.reference))
        for r in rows
        if r.source == "attained" and r.reference
    )
    return replace(known, attained_caches=attained) if attained else known


def highest_flops(known: KindPeaks, dtype: str) -> float | None:
    """Return the highest compute peak known for ``dtype`` (spec or measured), or None."""
    found = [known.flops_per_s(dtype, prefer=p) for p in ("spec", "measured")]
    values = [p.value for p in found if p is not None]
    return max(values) if values else None


def _with_spec(
    peaks: KindPeaks,
    kind: DeviceKind | None,
    kind_name: str,
    spec: list[DevicePeak],
    usable: float | None,
) -> KindPeaks:
    """Return ``peaks`` (measured) with the kind's spec: stored rows, else the shipped table."""
    if spec:
        chip = _stored_chip(kind, kind_name, spec[0].reference)
        return replace(
            peaks,
            spec_flops_per_s={
                r.dtype: r.flops_per_s
                for r in spec
                if r.dtype is not None and r.flops_per_s is not None
            },
            spec_bytes_per_s=next((r.bytes_per_s for r in spec if r.dtype is None), None),
            spec_reference=spec[0].reference,
            spec_origin="db",
            **({} if chip is None else _chip_fields(chip, usable)),
        )
    table = spec_peaks_for(kind_name, usable_cores=usable)
    if table is None:
        return peaks
    return replace(table, **{f: getattr(peaks, f) for f in _MEASURED_FIELDS})


_MEASURED_FIELDS = (
    "measured_flops_per_s",
    "measured_bytes_per_s",
    "measured_references",
    "measured_caches",
    "usable_cores_seen",
)


def _usable_cores_seen(session: Session, kind: DeviceKind | None) -> tuple[float, ...]:
    """Return the distinct usable-core counts the kind's hosts recorded, ascending.

    Only a CPU's roof is scaled by them: other kinds are not asked (no query).
    """
    if kind is None or kind.type != "cpu":
        return ()
    found: set[float] = set()
    for host in queries.list_hosts(session, kind_id=kind.id):
        allotment = (host.info or {}).get(CPU_ALLOTMENT)
        value = allotment.get("usable_cores") if isinstance(allotment, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf:
            found.add(float(value))
    return tuple(sorted(found))


def _stored_chip(
    kind: DeviceKind | None, kind_name: str, reference: str | None
) -> ChipMatch | None:
    """Return the chip whose spec rows are stored: the kind's ``SPEC_CHIP`` info, else re-matched.

    Rows stored before ``SPEC_CHIP`` existed name the chip first in their reference; the table's
    match for the kind is used only when it is that chip.
    """
    info = (kind.info or {}).get(SPEC_CHIP) if kind is not None else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        found = match_chip(info["name"])
        how = info.get("match")
        if found is not None and how in ("exact", "contains", "partial"):
            return ChipMatch(found.chip, how)
    found = match_chip(kind_name)
    if found is not None and (reference or "").split(" | ", 1)[0].endswith(found.chip.name):
        return found
    return None
