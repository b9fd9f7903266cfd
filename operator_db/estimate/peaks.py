"""Device peaks: the shipped spec-sheet table, measured attainable peaks, storage and the roofline.

Units: FLOP/s (integer OP/s for int8) and bytes/s; FLOPs are FLOPs, never MACs. Spec figures are
dense (a vendor's "with sparsity" figure is halved) and per chip (one GPU, one CPU socket). See
``peaks.yaml`` for the table's conventions and docs/peaks.md for how measured peaks are taken.

Storage scheme (``device_peaks``): one row per (device kind, source, dtype) for compute, with
``dtype`` and ``flops_per_s`` set and ``bytes_per_s`` NULL; one row per (device kind, source) for
memory bandwidth, with ``dtype`` NULL, ``bytes_per_s`` set and ``flops_per_s`` NULL. Spec rows
are replaced as a set per kind; measured rows as a set per (kind, host).
"""

from __future__ import annotations

import math
import platform
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, model_validator
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, DevicePeak
from operator_db.db.queries import PeakFigure
from operator_db.devices.base import Clock, Device
from operator_db.errors import MeasurementError, SpecError
from operator_db.measure.engine import BlockTimer
from operator_db.measure.stats import summarize
from operator_db.specs.io import format_error, format_loc

PEAK_TABLE_PATH = Path(__file__).with_name("peaks.yaml")
"""The shipped spec-sheet table."""

Category = Literal["server_cpu", "datacenter_gpu", "consumer_gpu", "asic", "soc"]
CATEGORIES: tuple[Category, ...] = ("server_cpu", "datacenter_gpu", "consumer_gpu", "asic", "soc")

PeakDtype = Literal[
    "float64",
    "float32",
    "tf32",
    "float16",
    "bfloat16",
    "int8",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
]
"""Dtypes a peak can be given for: torch dtype names, plus ``tf32`` (float32 matmuls on TF32 units).

``float8_e4m3fn`` stands for both OCP FP8 formats and ``float8_e4m3fnuz`` for both FNUZ formats
(each pair runs at one rate); ``int8`` figures are integer OP/s.
"""

PeakSource = Literal["spec", "measured"]
BANDWIDTH = "bandwidth"
"""The key of the memory-bandwidth peak in ``KindPeaks.measured_references``."""
BoundType = Literal["memory", "compute"]

# Other names of one rate class, tried in order after the dtype itself (see ``dtype_candidates``).
_FLOAT8_FAMILY = {
    "float8_e5m2": "float8_e4m3fn",
    "float8_e5m2fnuz": "float8_e4m3fnuz",
}


# --- the spec-sheet table ---------------------------------------------------------------------


class ChipPeaks(BaseModel):
    """One chip's spec-sheet peaks (dense, per chip) and where they come from."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(min_length=1)
    """Marketing name with form factor, e.g. ``NVIDIA H100 SXM5 80GB``."""
    aliases: list[str] = Field(default_factory=list)
    """Device-kind names this chip is stored under (NVML name, ``cpu:<model name>``, ...)."""
    category: Category
    vendor: str = Field(min_length=1)
    memory_bandwidth_bytes_per_s: PositiveFloat
    """Peak DRAM/HBM bandwidth, bytes/s."""
    peak_flops_per_s: dict[PeakDtype, PositiveFloat] = Field(min_length=1)
    """Dense peak per dtype, FLOP/s (int8: OP/s)."""
    source: str = Field(min_length=1)
    """The vendor document (title or URL) the figures come from."""
    notes: str = ""
    """Clocks, form factor and any derivation (CPU: cores x clock x FLOPs/cycle/core)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The name and every alias."""
        return (self.name, *self.aliases)


class PeakTable(BaseModel):
    """The whole table: chips with unique names and aliases (compared case-insensitively)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    chips: list[ChipPeaks] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> PeakTable:
        seen: dict[str, str] = {}
        for chip in self.chips:
            for name in dict.fromkeys(_normalize(n) for n in chip.names):
                if name in seen:
                    raise ValueError(f"{name!r} names both {seen[name]!r} and {chip.name!r}")
                seen[name] = chip.name
        return self


def _normalize(name: str) -> str:
    """Lower-case ``name`` and collapse its whitespace."""
    return " ".join(name.lower().split())


def parse_peak_table(data: object, source: str) -> list[ChipPeaks]:
    """Validate parsed YAML as a peak table.

    Raises:
        SpecError: naming ``source`` and the path of the first problem.
    """
    try:
        table = PeakTable.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise SpecError(source, format_loc(first["loc"]), format_error(first) + more) from None
    return list(table.chips)


def load_peak_table(path: Path | None = None) -> list[ChipPeaks]:
    """Return the chips of the table at ``path`` (default: the shipped ``peaks.yaml``).

    Raises:
        SpecError: the file is missing, not YAML, or not a valid table.
    """
    if path is None:
        return list(_shipped_table())
    return _read_table(path)


@lru_cache(maxsize=1)
def _shipped_table() -> tuple[ChipPeaks, ...]:
    return tuple(_read_table(PEAK_TABLE_PATH))


def _read_table(path: Path) -> list[ChipPeaks]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(str(path), "", f"not valid YAML: {' '.join(str(exc).split())}") from None
    return parse_peak_table(data, str(path))


def find_chip(name: str, chips: Sequence[ChipPeaks] | None = None) -> ChipPeaks | None:
    """Return the chip called ``name`` (its name or an alias), or None.

    Matching ignores case and repeated whitespace. Failing an exact match, a chip matches when
    one of its names contains ``name`` as whole words, or ``name`` contains one of them
    (``H100 PCIe``; ``cpu:Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz``), but only when exactly
    one chip does and ``name`` has at least 3 characters. Whole words: ``NVIDIA A10`` is not
    found in ``NVIDIA A100 80GB PCIe`` nor ``NVIDIA L4`` in ``NVIDIA L40``. ``chips`` defaults to
    the shipped table.
    """
    query = _normalize(name)
    table = load_peak_table() if chips is None else chips
    for chip in table:
        if any(_normalize(n) == query for n in chip.names):
            return chip
    if len(query) < 3:
        return None
    found = [
        chip
        for chip in table
        if any(
            _contains_words(known, query) or _contains_words(query, known)
            for known in map(_normalize, chip.names)
        )
    ]
    return found[0] if len(found) == 1 else None


def _contains_words(text: str, part: str) -> bool:
    """Say whether ``part`` occurs in ``text`` with no letter or digit glued to either end."""
    before = r"(?<![0-9a-z])" if part[:1].isalnum() else ""
    after = r"(?![0-9a-z])" if part[-1:].isalnum() else ""
    return re.search(before + re.escape(part) + after, text) is not None


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


def spec_reference(chip: ChipPeaks) -> str:
    """Return the text stored as a spec peak's ``reference``: chip, source and notes."""
    parts = [chip.name, chip.source] + ([chip.notes] if chip.notes else [])
    return " | ".join(parts)


# --- roofline ---------------------------------------------------------------------------------


def _check_work(flops: float, nbytes: float) -> None:
    if flops < 0 or nbytes < 0 or math.isnan(flops) or math.isnan(nbytes):
        raise ValueError(f"flops and bytes must be >= 0, got {flops!r} and {nbytes!r}")


def _check_peaks(peak_flops_per_s: float, peak_bytes_per_s: float) -> None:
    if not (peak_flops_per_s > 0 and peak_bytes_per_s > 0):
        raise ValueError(
            f"peaks must be > 0, got {peak_flops_per_s!r} FLOP/s and {peak_bytes_per_s!r} B/s"
        )


def roofline_time_s(
    flops: float, nbytes: float, peak_flops_per_s: float, peak_bytes_per_s: float
) -> float:
    """Return the roofline lower bound on run time, s: max(flops / peak FLOP/s, bytes / peak B/s).

    Raises:
        ValueError: negative work or non-positive peaks.
    """
    _check_work(flops, nbytes)
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return max(flops / peak_flops_per_s, nbytes / peak_bytes_per_s)


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
    _check_work(flops, nbytes)
    _check_peaks(peak_flops_per_s, peak_bytes_per_s)
    return "compute" if flops / peak_flops_per_s > nbytes / peak_bytes_per_s else "memory"


# --- peaks of a device kind -------------------------------------------------------------------


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


# --- measuring attainable peaks ---------------------------------------------------------------

MATMUL_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
"""Dtypes ``measure_peaks`` can measure (``tf32``: float32 with TF32 enabled, CUDA only)."""

GPU_MATMUL_N = 8192
CPU_MATMUL_N = 2048
GPU_COPY_BYTES = 1 << 30
CPU_COPY_BYTES = 256 << 20

Run = Callable[[], object]
_MAX_CALLS_PER_BLOCK = 1 << 16


@dataclass(frozen=True)
class KernelTiming:
    """Raw timing of one peak kernel: ``len(block_s)`` blocks of ``calls_per_block`` calls."""

    kernel: Literal["matmul", "copy"]
    dtype: str | None
    """The matmul dtype; None for the copy."""
    size: int
    """Matmul: n of the n x n x n product; copy: bytes of each buffer."""
    work_per_call: int
    """Matmul: FLOPs per call, 2 n^3; copy: bytes moved per call, 2 x size (read + write)."""
    calls_per_block: int
    block_s: tuple[float, ...]
    """Raw block durations, s."""

    @property
    def rates_per_s(self) -> tuple[float, ...]:
        """Work per second of each block: FLOP/s (matmul) or bytes/s (copy)."""
        return tuple(self.work_per_call * self.calls_per_block / b for b in self.block_s)

    @property
    def best_per_s(self) -> float:
        """The best block's rate: the attainable peak."""
        return max(self.rates_per_s)

    @property
    def median_per_s(self) -> float:
        """The median block rate."""
        return summarize(self.rates_per_s).median

    def describe(self) -> str:
        """Return a one-line description (stored as the measured peak's ``reference``)."""
        unit = "FLOP/s" if self.kernel == "matmul" else "B/s"
        what = (
            f"matmul {self.dtype} n={self.size}"
            if self.kernel == "matmul"
            else f"copy_ of {self.size} B (2x counted)"
        )
        return (
            f"{what}: best of {len(self.block_s)} blocks x {self.calls_per_block} calls; "
            f"median {self.median_per_s:.4g} {unit}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the raw samples and derived rates, JSON-ready."""
        return {
            "kernel": self.kernel,
            "dtype": self.dtype,
            "size": self.size,
            "work_per_call": self.work_per_call,
            "calls_per_block": self.calls_per_block,
            "block_s": list(self.block_s),
            "best_per_s": self.best_per_s,
            "median_per_s": self.median_per_s,
        }


@dataclass(frozen=True)
class MeasuredPeaks:
    """Attainable peaks of one device: a matmul per dtype, a copy for bandwidth, with raw blocks."""

    kind_name: str
    device_type: str
    """``gpu``, ``cpu`` or ``fake``: the device kind's type."""
    matmul: Mapping[str, KernelTiming]
    copy: KernelTiming | None
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Dtypes not measured, with the reason."""
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def flops_per_s(self) -> dict[str, float]:
        """Best FLOP/s per measured dtype."""
        return {dtype: t.best_per_s for dtype, t in self.matmul.items()}

    @property
    def bytes_per_s(self) -> float | None:
        """Best copy bandwidth, bytes/s (bytes read + bytes written per second)."""
        return self.copy.best_per_s if self.copy is not None else None

    def as_dict(self) -> dict[str, Any]:
        """Return everything, JSON-ready."""
        return {
            "kind_name": self.kind_name,
            "device_type": self.device_type,
            "matmul": {dtype: t.as_dict() for dtype, t in self.matmul.items()},
            "copy": self.copy.as_dict() if self.copy is not None else None,
            "skipped": dict(self.skipped),
            "provenance": self.provenance,
        }


@contextmanager
def _float32_matmul_precision(precision: str) -> Iterator[None]:
    """Set ``torch.set_float32_matmul_precision`` for the block, then restore it."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _time_kernel(
    run: Run, timer: BlockTimer, *, min_time_s: float, repeats: int
) -> tuple[int, tuple[float, ...]]:
    """Warm up for a quarter of ``min_time_s``, then time ``repeats`` blocks filling it.

    Returns (calls per block, block durations in s).

    Raises:
        MeasurementError: the clock did not advance over a block.
    """
    warmup_s = min_time_s / 4
    spent = 0.0
    calls = 0
    per_call = 0.0
    batch = 1
    while calls < 2 or spent < warmup_s:
        elapsed = timer.block_s(run, batch)
        if elapsed <= 0:
            raise MeasurementError(f"{batch} calls took no measurable time; is the clock moving?")
        per_call = elapsed / batch
        spent += elapsed
        calls += batch
        batch = min(batch * 2, _MAX_CALLS_PER_BLOCK)
    per_block = min(_MAX_CALLS_PER_BLOCK, max(1, math.ceil(min_time_s / repeats / per_call)))
    blocks = tuple(timer.block_s(run, per_block) for _ in range(repeats))
    if min(blocks) <= 0:
        raise MeasurementError(f"{per_block} calls took no measurable time; is the clock moving?")
    return per_block, blocks


def _probe_matmul(
    dtype: str, n: int, dev: torch.device, timer: BlockTimer, max_call_s: float
) -> str | None:
    """Return why a dtype's n x n matmul should be skipped (too slow, unsupported), or None.

    Times growing square matmuls from n=128 and extrapolates by n^3 (small sizes run less
    efficiently, so the estimate errs towards slow); stops when the estimate fits ``max_call_s``.
    """
    size = min(n, 128)
    while True:
        try:
            a, b, c = _matmul_operands(size, MATMUL_DTYPES[dtype], dev)
            run = _matmul_run(a, b, c)
            timer.block_s(run, 1)
            t = min(timer.block_s(run, 1), timer.block_s(run, 1))
        except (RuntimeError, NotImplementedError) as exc:
            return f"{dtype} matmul failed on {dev.type}: {' '.join(str(exc).split())[:200]}"
        estimate_s = t * (n / size) ** 3
        if estimate_s <= max_call_s:
            return None
        if size >= n or t * 8 > max_call_s:
            rate = 2 * size**3 / t if t > 0 else math.inf
            return (
                f"{dtype} matmul too slow on {dev.type}: ~{estimate_s:.3g} s per call at n={n} "
                f"({rate:.3g} FLOP/s at n={size}); pass a smaller matmul_n to measure it"
            )
        size = min(n, size * 2)


def _matmul_operands(
    n: int, dtype: torch.dtype, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.randn(n, n, dtype=dtype, device=dev)
    b = torch.randn(n, n, dtype=dtype, device=dev)
    return a, b, torch.empty(n, n, dtype=dtype, device=dev)


def _matmul_run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Run:
    def run() -> object:
        return torch.matmul(a, b, out=c)

    return run


def measure_peaks(
    device: Device,
    *,
    dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
    matmul_n: int | None = None,
    copy_bytes: int | None = None,
    min_time_s: float = 0.5,
    repeats: int = 5,
    max_call_s: float = 1.0,
    clock: Clock = time.perf_counter_ns,
) -> MeasuredPeaks:
    """Measure the attainable compute and bandwidth peaks of ``device``.

    Compute: an n x n by n x n ``torch.matmul`` into a preallocated output per dtype, counted as
    2 n^3 FLOPs per call (n: ``matmul_n``, default 8192 on a GPU, 2048 elsewhere). ``float32``
    runs in IEEE FP32 (``float32_matmul_precision("highest")``); ``tf32`` with TF32 enabled (CUDA
    only). A dtype whose call would take longer than ``max_call_s`` s (float16 on most CPUs), or
    that fails, is skipped with the reason in ``skipped``. Bandwidth: ``dst.copy_(src)`` of two
    ``copy_bytes`` buffers (default 1 GiB on a GPU, 256 MiB elsewhere), counted as 2 x
    ``copy_bytes`` per call (read + write).

    Each kernel is warmed up for ``min_time_s / 4``, then timed as ``repeats`` blocks filling
    ``min_time_s`` together (CUDA events on a GPU; ``clock``, in ns, around ``synchronize()``
    elsewhere). The best block is the attainable peak; the raw blocks and the median are kept.

    Raises:
        ValueError: an unknown dtype or a non-positive size, time or count.
        MeasurementError: the device ran out of memory for the buffers.
    """
    unknown = [d for d in dtypes if d not in MATMUL_DTYPES]
    if unknown:
        raise ValueError(f"cannot measure {unknown}; measurable: {sorted(MATMUL_DTYPES)}")
    if min_time_s <= 0 or max_call_s <= 0 or repeats < 1:
        raise ValueError("min_time_s and max_call_s must be > 0 and repeats >= 1")
    dev = device.torch_device()
    cuda = dev.type == "cuda"
    n = matmul_n if matmul_n is not None else (GPU_MATMUL_N if cuda else CPU_MATMUL_N)
    nbytes = copy_bytes if copy_bytes is not None else (GPU_COPY_BYTES if cuda else CPU_COPY_BYTES)
    if n < 1 or nbytes < 1:
        raise ValueError(f"matmul_n and copy_bytes must be >= 1, got {n} and {nbytes}")
    timer = BlockTimer(device, clock)
    identity = device.identity()
    matmul: dict[str, KernelTiming] = {}
    skipped: dict[str, str] = {}
    with torch.cuda.device(dev) if cuda else nullcontext():
        for dtype in dict.fromkeys(dtypes):
            if dtype == "tf32" and not cuda:
                skipped[dtype] = f"tf32 is a CUDA Tensor Core mode; not measured on {dev.type}"
                continue
            with _float32_matmul_precision("high" if dtype == "tf32" else "highest"):
                reason = _probe_matmul(dtype, n, dev, timer, max_call_s)
                if reason is not None:
                    skipped[dtype] = reason
                    continue
                matmul[dtype] = _measure_matmul(dtype, n, dev, timer, min_time_s, repeats)
        copy = _measure_copy(nbytes, dev, timer, min_time_s, repeats)
    return MeasuredPeaks(
        kind_name=identity.name,
        device_type=identity.kind,
        matmul=matmul,
        copy=copy,
        skipped=skipped,
        provenance={
            "device": identity.as_dict(),
            "torch_device": str(dev),
            "timer": "cuda_events" if cuda else "host_clock",
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "min_time_s": min_time_s,
            "repeats": repeats,
        },
    )


def _measure_matmul(
    dtype: str, n: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    try:
        a, b, c = _matmul_operands(n, MATMUL_DTYPES[dtype], dev)
    except torch.OutOfMemoryError as exc:
        raise MeasurementError(f"out of memory for three {n}x{n} {dtype} matrices") from exc
    calls, blocks = _time_kernel(
        _matmul_run(a, b, c), timer, min_time_s=min_time_s, repeats=repeats
    )
    return KernelTiming("matmul", dtype, n, 2 * n**3, calls, blocks)


def _measure_copy(
    nbytes: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    try:
        # ones, not empty: untouched pages would be read as the shared zero page on a CPU.
        src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
    except torch.OutOfMemoryError as exc:
        raise MeasurementError(f"out of memory for two {nbytes}-byte copy buffers") from exc

    def run() -> object:
        return dst.copy_(src)

    calls, blocks = _time_kernel(run, timer, min_time_s=min_time_s, repeats=repeats)
    return KernelTiming("copy", None, nbytes, 2 * nbytes, calls, blocks)


# --- storing and reading peaks ----------------------------------------------------------------


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
    kind = queries.find_device_kind(session, kind_name)
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
