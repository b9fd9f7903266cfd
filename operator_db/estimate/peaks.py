"""What is known of a device kind's peaks (spec sheet and measured), and storing them.

Spec peaks come from the database or, where none are stored, from the shipped table
(:mod:`operator_db.estimate.chips`); measured ones from ``opdb peaks``
(:func:`operator_db.measure.peaks.measure_peaks`). :class:`KindPeaks` holds both for a kind;
:func:`best_peaks` and :func:`peaks_of` pick the :class:`~operator_db.estimate.roofline.Peaks` a
roofline is drawn from. Storage goes through :mod:`operator_db.db.queries.peaks`; docs/peaks.md
says how measured peaks are taken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, DevicePeak
from operator_db.db.queries import PeakFigure
from operator_db.estimate.chips import ChipPeaks, find_chip, spec_reference
from operator_db.estimate.roofline import Peaks

if TYPE_CHECKING:  # measure imports torch; estimating needs none of it
    from operator_db.measure.peaks import MeasuredPeaks

PeakSource = Literal["spec", "measured"]
BANDWIDTH = "bandwidth"
"""The key of the memory-bandwidth peak in ``KindPeaks.measured_references``."""

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
    """

    kind_name: str
    spec_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    spec_bytes_per_s: float | None = None
    spec_reference: str | None = None
    spec_origin: Literal["db", "table"] | None = None
    measured_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    measured_bytes_per_s: float | None = None
    measured_references: Mapping[str, str] = field(default_factory=dict)
    """How each measured peak was taken, by dtype (``BANDWIDTH`` for the copy)."""

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
                    return Peak(value, source, candidate, self._reference(source, candidate))
        return None

    def bytes_per_s(self, *, prefer: PeakSource = "measured") -> Peak | None:
        """Return the memory-bandwidth peak, the ``prefer`` source first; None if neither."""
        order: tuple[PeakSource, PeakSource] = (
            ("measured", "spec") if prefer == "measured" else ("spec", "measured")
        )
        for source in order:
            value = self.measured_bytes_per_s if source == "measured" else self.spec_bytes_per_s
            if value is not None:
                return Peak(value, source, None, self._reference(source, BANDWIDTH))
        return None

    def _reference(self, source: PeakSource, key: str) -> str | None:
        return self.measured_references.get(key) if source == "measured" else self.spec_reference

    def rows(self) -> list[dict[str, Any]]:
        """Return one row per dtype (then bandwidth): spec, measured, and measured / spec."""
        dtypes = list(dict.fromkeys([*self.spec_flops_per_s, *self.measured_flops_per_s]))
        out: list[dict[str, Any]] = []
        for dtype in dtypes:
            spec = self.spec_flops_per_s.get(dtype)
            measured = self.measured_flops_per_s.get(dtype)
            out.append(_row("flops_per_s", dtype, spec, measured))
        if self.spec_bytes_per_s is not None or self.measured_bytes_per_s is not None:
            out.append(_row("bytes_per_s", None, self.spec_bytes_per_s, self.measured_bytes_per_s))
        return out


def _row(
    quantity: str, dtype: str | None, spec: float | None, measured: float | None
) -> dict[str, Any]:
    fraction = measured / spec if spec and measured is not None else None
    return {
        "quantity": quantity,
        "dtype": dtype,
        "spec": spec,
        "measured": measured,
        "fraction_of_spec": fraction,
    }


def peaks_of(kind: KindPeaks, dtype: str, source: PeakSource) -> Peaks | None:
    """Return ``source``'s compute peak for ``dtype`` and bandwidth as :class:`Peaks`, if both."""
    flops = kind.flops_per_s(dtype, prefer=source)
    bw = kind.bytes_per_s(prefer=source)
    if flops is None or bw is None or flops.source != source or bw.source != source:
        return None
    return Peaks(flops.value, bw.value, source=f"{source} {flops.dtype} peak and bandwidth")


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
    return Peaks(flops.value, bw.value, source=f"{flops.source} FLOP/s, {bw.source} bandwidth")


def spec_peaks_for(kind_name: str) -> KindPeaks | None:
    """Return the shipped table's peaks for a device kind (no database), or None if unknown."""
    chip = find_chip(kind_name)
    if chip is None:
        return None
    return KindPeaks(
        kind_name=kind_name,
        spec_flops_per_s={str(k): v for k, v in chip.peak_flops_per_s.items()},
        spec_bytes_per_s=chip.memory_bandwidth_bytes_per_s,
        spec_reference=spec_reference(chip),
        spec_origin="table",
    )


def _kind(session: Session, device_kind: str | DeviceKind, type_: str | None) -> DeviceKind:
    if isinstance(device_kind, DeviceKind):
        return device_kind
    return queries.get_or_create_device_kind(session, device_kind, type_)


def store_spec_peaks(
    session: Session, chip: ChipPeaks, device_kind: str | DeviceKind
) -> list[DevicePeak]:
    """Store ``chip``'s spec peaks for a device kind (created if new), replacing its spec rows.

    One row per dtype (``flops_per_s``) and one bandwidth row (``dtype`` NULL, ``bytes_per_s``),
    each with ``reference`` = chip, source and notes. A new kind named by a string gets the type
    ``get_or_create_device_kind`` guesses from its name. Flushes; the caller commits.
    """
    kind = _kind(session, device_kind, None)
    reference = spec_reference(chip)
    figures = [PeakFigure(d, value, reference) for d, value in chip.peak_flops_per_s.items()]
    figures.append(PeakFigure(None, chip.memory_bandwidth_bytes_per_s, reference))
    return queries.replace_peaks(session, kind.id, "spec", figures)


def store_measured_peaks(
    session: Session, kind_name: str, measured: MeasuredPeaks, host_id: int | None = None
) -> list[DevicePeak]:
    """Store measured peaks of a device kind (created if new), replacing this host's earlier ones.

    One row per measured dtype (best FLOP/s) and one bandwidth row (best copy bytes/s) when a copy
    was measured; ``reference`` describes the kernel, its blocks and the median. Rows of other
    hosts of the kind are kept. Flushes; the caller commits.
    """
    kind = _kind(session, kind_name, measured.device_type)
    figures = [
        PeakFigure(dtype, timing.best_per_s, timing.describe())
        for dtype, timing in measured.matmul.items()
    ]
    if measured.copy is not None:
        figures.append(PeakFigure(None, measured.copy.best_per_s, measured.copy.describe()))
    return queries.replace_peaks(session, kind.id, "measured", figures, host_id=host_id)


def peaks_for_kind(session: Session, kind_name: str) -> KindPeaks:
    """Return the best-known spec and measured peaks of a device kind.

    Spec: the stored spec rows, or (none stored) the shipped table's chip matching ``kind_name``.
    Measured: per dtype, and for bandwidth, the highest stored value over all hosts. An unknown
    kind with no matching chip gives an empty ``KindPeaks``.
    """
    return kind_peaks(session, queries.find_device_kind(session, kind_name), kind_name)


def kind_peaks(session: Session, kind: DeviceKind | None, kind_name: str) -> KindPeaks:
    """:func:`peaks_for_kind` of a kind already read (None: not stored, the table only)."""
    rows = queries.peak_rows(session, kind.id) if kind is not None else []
    spec = [r for r in rows if r.source == "spec"]
    measured_flops: dict[str, float] = {}
    measured_bw: float | None = None
    references: dict[str, str] = {}
    for r in rows:
        if r.source != "measured":
            continue
        if r.dtype is not None and r.flops_per_s is not None:
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
    peaks = KindPeaks(
        kind_name=kind_name,
        measured_flops_per_s=measured_flops,
        measured_bytes_per_s=measured_bw,
        measured_references=references,
    )
    if spec:
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
        )
    table = spec_peaks_for(kind_name)
    if table is None:
        return peaks
    return replace(
        peaks,
        spec_flops_per_s=table.spec_flops_per_s,
        spec_bytes_per_s=table.spec_bytes_per_s,
        spec_reference=table.spec_reference,
        spec_origin="table",
    )


def record_peaks(
    session: Session, measured: MeasuredPeaks, *, host_id: int | None = None
) -> KindPeaks:
    """Store what ``opdb peaks`` measured, plus the table's spec peaks if none are stored yet.

    Measure first and call this in a short transaction afterwards (on SQLite a write transaction
    holds the database lock). Returns the kind's peaks as ``peaks_for_kind`` sees them.
    """
    kind = queries.get_or_create_device_kind(session, measured.kind_name, measured.device_type)
    store_measured_peaks(session, kind.name, measured, host_id=host_id)
    chip = find_chip(measured.kind_name)
    if chip is not None and not queries.has_spec_peaks(session, kind.id):
        store_spec_peaks(session, chip, kind)
    return peaks_for_kind(session, measured.kind_name)
