"""What a data set's reader yields: checked rows, bad rows, and the counts of an import."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from operator_db.datasets.runs import identity
from operator_db.specs.schema import Mode, OperatorSpec

OnBad = Literal["skip", "refuse"]
"""What a bad row does: it is skipped and counted, or the whole import is refused."""


@dataclass(frozen=True)
class SourceInfo:
    """A data set as the ``data_sources`` table holds it (``db.models.DataSource``)."""

    name: str
    title: str
    url: str | None = None
    version: str | None = None
    license: str | None = None
    citation: str | None = None
    method: str | None = None
    """How its figures were measured, in words."""
    info: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> dict[str, Any]:
        """Return the fields as ``DataSource`` columns (all but ``name``)."""
        return {
            "title": self.title,
            "url": self.url,
            "version": self.version,
            "license": self.license,
            "citation": self.citation,
            "method": self.method,
            "info": self.info,
        }


@dataclass(frozen=True)
class KindInfo:
    """A device kind a data set measured on, and what is known of it."""

    name: str
    """The device kind's name: the NVML name for an NVIDIA GPU."""
    vendor: str | None = None
    architecture: str | None = None
    memory_bytes: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """Goes to ``device_kinds.info`` under the data set's name (its own view of the device)."""


Built = tuple[OperatorSpec, str] | str
"""A row's configuration and its key (``specs.keys.operator_key``), or why it has none."""


@dataclass(frozen=True)
class OpRow:
    """One per-operator figure of a data set: a configuration on a device, its time per call."""

    what: tuple[str | int, ...]
    """What ran, in the data set's own terms: its operator's name and shape (the identity)."""
    build: Callable[[], Built]
    """The configuration, as operator-db's harvester writes the same call (with its cost), and
    its key; or why there is none (a shape over the spec format's limits). Built only for a
    row that is not stored yet: most rows of a second run are duplicates."""
    mode: Mode
    device: str
    """The device kind's name."""
    time_s: float
    """Time per call, s (as the data set measured it: ``SourceInfo.method``)."""
    line: int
    """The row's line in its file (the header is line 1)."""
    details: Callable[[], dict[str, Any]] = dict
    """What else the row says (the kernel and its grid), kept in the result's provenance: read
    only for a row that is stored."""

    def identity(self) -> str:
        """Return the row's identity within its data set: a digest of device, what ran, time.

        The same figure in two files of a data set (a merged file and a per-device one) is one
        result; the time at 12 significant digits, so that a float written twice with other
        digits is still the same figure.
        """
        return identity(self.device, *self.what, self.time_s)


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be imported, and why."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        """Return ``file:line: reason``."""
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass
class FileCounts:
    """What an import did with one file's rows."""

    file: str
    read: int = 0
    imported: int = 0
    duplicate: int = 0
    """Rows already stored (an earlier run) or seen earlier in this one (another file)."""
    skipped: int = 0
    """Bad rows (each reported as a :class:`BadRow`)."""


class DataSet(Protocol):
    """A data set on disk, as the importer reads it."""

    source: SourceInfo

    def kinds(self) -> Sequence[KindInfo]:
        """Return the device kinds it measured."""

    def files(self) -> Sequence[str]:
        """Return its files of per-operator rows, as paths relative to its root."""

    def read(self, file: str) -> Iterator[OpRow | BadRow]:
        """Yield one file's rows, checked, in order."""
