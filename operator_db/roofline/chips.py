"""The shipped spec-sheet table of chip peaks (``peaks.yaml``) and matching device kinds to chips.

Units: FLOP/s (integer OP/s for int8) and bytes/s; FLOPs are FLOPs, never MACs. Spec figures are
dense (a vendor's "with sparsity" figure is halved) and per chip (one GPU, one CPU socket). See
``peaks.yaml`` for the table's conventions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from operator_db.errors import SpecError
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


MemoryType = Literal["HBM", "GDDR", "LPDDR", "DDR"]
"""DRAM technology families, without the generation (HBM3e is ``HBM``, GDDR6X ``GDDR``)."""

COMPUTE_CAPABILITY_PATTERN = r"^\d+\.\d+$"
"""A CUDA compute capability: major.minor, as ``"8.9"``."""

FP32_IDENTITY_TOLERANCE = 0.02
"""How far a GPU's float32 peak may be from 2 x SMs x FP32 lanes x boost clock: vendors round."""


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
    cores: PositiveInt | None = None
    """Cores per socket: required for server CPUs, whose roofs are scaled to the cores a process
    may use (``scaled_to_cores``); absent for other chips."""
    boost_clock_ratio: float | None = Field(default=None, ge=1.0)
    """Max boost clock / base clock (server CPUs, whose FLOP/s are at the base clock): a process
    on a few of a socket's cores may run them up to the boost clock, so a roof scaled to fewer
    cores than the chip's is raised by this ratio (an upper bound stays an upper bound)."""
    # GPU spec-sheet facts (None where unknown or not a GPU; peaks.yaml's header gives the units).
    sms: PositiveInt | None = None
    """Streaming multiprocessors enabled on the product (not the full die's)."""
    cores_per_sm: PositiveInt | None = None
    """FP32 lanes ("CUDA cores") per SM: an FMA each per clock."""
    boost_clock_mhz: PositiveInt | None = None
    """The clock, MHz, the float32 peak is computed from (the vendor's boost clock): float32 =
    ``2 x sms x cores_per_sm x boost_clock_mhz x 1e6`` within ``FP32_IDENTITY_TOLERANCE``."""
    base_clock_mhz: PositiveInt | None = None
    """The vendor's base clock, MHz, where it publishes one."""
    memory_bytes: PositiveFloat | None = None
    """Device memory (DRAM/HBM) capacity, bytes: the vendor's "GB" read as GiB (memory chips
    come in powers of two: ``80GB`` HBM3 is 80 x 2**30 bytes)."""
    l2_cache_bytes: PositiveFloat | None = None
    """Last-level (L2) cache, bytes: the vendor's "MB" read as MiB (``50 MB`` is 50 x 2**20)."""
    compute_capability: str | None = Field(default=None, pattern=COMPUTE_CAPABILITY_PATTERN)
    """CUDA compute capability, ``"X.Y"`` (``"8.0"`` for the A100): NVIDIA GPUs only."""
    board_power_w: PositiveFloat | None = None
    """The board's maximum power (TDP / TBP; a module's maximum power mode), W, from the
    vendor's datasheet."""
    memory_type: MemoryType | None = None
    """DRAM technology family of the device memory: HBM2/HBM2e/HBM3/HBM3e are ``HBM``,
    GDDR5/GDDR6/GDDR6X ``GDDR``, LPDDR5 ``LPDDR``."""

    @property
    def names(self) -> tuple[str, ...]:
        """The name and every alias."""
        return (self.name, *self.aliases)

    @property
    def fp32_from_clock(self) -> float | None:
        """``2 x sms x cores_per_sm x boost_clock_mhz`` in FLOP/s, or None without all three."""
        if self.sms is None or self.cores_per_sm is None or self.boost_clock_mhz is None:
            return None
        return 2.0 * self.sms * self.cores_per_sm * self.boost_clock_mhz * 1e6

    @model_validator(mode="after")
    def _cores_for_cpus(self) -> ChipPeaks:
        cpu = self.category == "server_cpu"
        if cpu != (self.cores is not None):
            raise ValueError("cores is required for server_cpu chips and only for them")
        if self.boost_clock_ratio is not None and not cpu:
            raise ValueError("boost_clock_ratio is for server_cpu chips only")
        gpu_fields = (self.sms, self.cores_per_sm, self.boost_clock_mhz, self.base_clock_mhz)
        if cpu and any(v is not None for v in gpu_fields):
            raise ValueError("sms, cores_per_sm and the clocks in MHz are for GPUs, not server_cpu")
        return self

    @model_validator(mode="after")
    def _compute_capability_for_nvidia(self) -> ChipPeaks:
        if self.compute_capability is not None and (
            self.vendor != "NVIDIA" or self.category == "server_cpu"
        ):
            raise ValueError("compute_capability is for NVIDIA GPUs only")
        return self

    @model_validator(mode="after")
    def _clocks_agree(self) -> ChipPeaks:
        if self.base_clock_mhz is not None and (
            self.boost_clock_mhz is None or self.base_clock_mhz > self.boost_clock_mhz
        ):
            raise ValueError("base_clock_mhz needs a boost_clock_mhz at least as high")
        derived, fp32 = self.fp32_from_clock, self.peak_flops_per_s.get("float32")
        if derived and fp32 and abs(derived / fp32 - 1) > FP32_IDENTITY_TOLERANCE:
            raise ValueError(
                f"2 x sms x cores_per_sm x boost_clock_mhz = {derived:.4g} FLOP/s, but the "
                f"float32 peak is {fp32:.4g} (more than {FP32_IDENTITY_TOLERANCE:.0%} apart)"
            )
        return self


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


MatchKind = Literal["exact", "contains", "partial"]
"""How a device-kind name matched a chip: ``exact`` (its name or an alias), ``contains`` (the
name holds an alias and more, such as a CPU's clock suffix: the same chip), ``partial`` (the name
is only part of the chip's, such as a family: the closest spec-sheet match, not the chip)."""


@dataclass(frozen=True)
class ChipMatch:
    """A chip of the table found for a device-kind name, and how it was found."""

    chip: ChipPeaks
    how: MatchKind

    @property
    def identical(self) -> bool:
        """True when the name names this chip (``exact`` or ``contains``), not just its family."""
        return self.how != "partial"

    @property
    def label(self) -> str:
        """The chip's name, or ``closest spec-sheet match: <name>`` for a partial match."""
        return self.chip.name if self.identical else f"closest spec-sheet match: {self.chip.name}"


def match_chip(name: str, chips: Sequence[ChipPeaks] | None = None) -> ChipMatch | None:
    """Return the chip called ``name`` with how it matched, or None.

    Matching ignores case and repeated whitespace. An equal name or alias is ``exact``. Failing
    that, a chip matches when ``name`` contains one of its names as whole words (``contains``:
    ``cpu:Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz``, the same chip with a clock suffix), or
    one of its names contains ``name`` (``partial``: ``H100 PCIe``, or ``cpu:AMD EPYC``, a family
    whose closest entry is the EPYC 9654), but only when exactly one chip does and ``name`` has
    at least 3 characters. Whole words: ``NVIDIA A10`` is not found in ``NVIDIA A100 80GB PCIe``
    nor ``NVIDIA L4`` in ``NVIDIA L40``. ``chips`` defaults to the shipped table.
    """
    if chips is None:
        return _match_shipped_chip(name)
    return _match(name, chips)


def find_chip(name: str, chips: Sequence[ChipPeaks] | None = None) -> ChipPeaks | None:
    """Return the chip :func:`match_chip` finds for ``name``, however it matched, or None."""
    found = match_chip(name, chips)
    return None if found is None else found.chip


def chip_spec(name: str, chips: Sequence[ChipPeaks] | None = None) -> ChipPeaks | None:
    """Return the chip ``name`` names (an ``exact`` or ``contains`` match), or None.

    For a device's own spec-sheet facts (SMs, clocks, memory, L2): unlike :func:`find_chip`, a
    ``partial`` match (a family, another chip's figures) is None. NVML names such as
    ``Tesla P100-PCIE-16GB`` are aliases, so they match exactly.
    """
    found = match_chip(name, chips)
    return found.chip if found is not None and found.identical else None


@lru_cache(maxsize=1024)
def _match_shipped_chip(name: str) -> ChipMatch | None:
    """:func:`match_chip` in the shipped table, which never changes: each name is matched once."""
    return _match(name, _shipped_table())


def _match(name: str, table: Sequence[ChipPeaks]) -> ChipMatch | None:
    query = _normalize(name)
    for chip in table:
        if any(_normalize(n) == query for n in chip.names):
            return ChipMatch(chip, "exact")
    if len(query) < 3:
        return None
    found: list[ChipMatch] = []
    for chip in table:
        known = [_normalize(n) for n in chip.names]
        if any(_contains_words(query, k) for k in known):
            found.append(ChipMatch(chip, "contains"))
        elif any(_contains_words(k, query) for k in known):
            found.append(ChipMatch(chip, "partial"))
    return found[0] if len(found) == 1 else None


def _contains_words(text: str, part: str) -> bool:
    """Say whether ``part`` occurs in ``text`` with no letter or digit glued to either end."""
    before = r"(?<![0-9a-z])" if part[:1].isalnum() else ""
    after = r"(?![0-9a-z])" if part[-1:].isalnum() else ""
    return re.search(before + re.escape(part) + after, text) is not None


def spec_reference(chip: ChipPeaks, how: MatchKind = "exact") -> str:
    """Return the text stored as a spec peak's ``reference``: chip, source and notes.

    A ``partial`` match starts with ``closest spec-sheet match:``: the figures are another chip's.
    """
    name = ChipMatch(chip, how).label
    parts = [name, chip.source] + ([chip.notes] if chip.notes else [])
    return " | ".join(parts)


def scaled_to_cores(value: float, chip_cores: int, usable_cores: float) -> float:
    """Scale a whole-chip figure (FLOP/s or bytes/s) to ``usable_cores`` of ``chip_cores``.

    Linear in cores: a core's FMA units are its own, and a socket's memory channels are shared
    evenly when every core streams (docs/peaks.md, "CPU roofs"). More usable cores than the chip
    has (a two-socket host) scales above the one-socket figure.

    Raises:
        ValueError: non-positive core counts.
    """
    if chip_cores <= 0 or usable_cores <= 0:
        raise ValueError(f"core counts must be > 0, got {usable_cores!r} of {chip_cores!r}")
    return value * usable_cores / chip_cores
