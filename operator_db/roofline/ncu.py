"""Nsight Compute hardware counters: the command that profiles a model, its CSV, the import.

``ncu --nvtx --csv --page raw`` prints one row per profiled kernel: a header row of column names
(identity columns, then one column per metric), a row of the metrics' units, then the kernels.
Each kernel belongs to the configuration whose NVTX range (``opdb:<key>``,
:func:`operator_db.specs.keys.nvtx_range_name`) was open when it was launched; a configuration's
counters are the sums over the kernels of its one profiled call. docs/ncu.md says what is
measured, the formula of each figure, and what was checked against which document.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from operator_db.db import queries
from operator_db.db.queries import CounterFigures
from operator_db.errors import InvalidInputError, TooLargeError
from operator_db.specs.keys import NVTX_RANGE_REGEX, key_of_nvtx_range

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

TIME = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
TENSOR = "sm__inst_executed_pipe_tensor.sum"
DEVICE_NAME = "device__attribute_display_name"
_INST = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
PRECISIONS: dict[str, tuple[str, str, str]] = {
    precision: (_INST.format(p + "add"), _INST.format(p + "mul"), _INST.format(p + "fma"))
    for precision, p in (("fp32", "f"), ("fp16", "h"), ("fp64", "d"))
}
"""Per precision, the thread-instruction counters of its add, mul and fma (FP32: fadd, fmul,
ffma): FLOPs = add + mul + 2 × fma, the formula of ncu's own roofline sections."""

METRICS: tuple[str, ...] = (
    TIME,
    DRAM_READ,
    DRAM_WRITE,
    *(m for names in PRECISIONS.values() for m in names),
    TENSOR,
    DEVICE_NAME,
)
"""What ``opdb ncu command`` asks ncu for (``--metrics``)."""

MAX_CSV_BYTES = 256 << 20
"""Largest CSV ``opdb ncu import`` reads, in bytes."""

_METRIC_COLUMN = re.compile(r"^[a-z][a-z0-9]*__[a-z0-9_.]+$")
"""An ncu metric name (``unit__counter.rollup``), as opposed to an identity column ("ID")."""
_PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_SECONDS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
_SECONDS |= {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_BYTES = re.compile(r"^(K|M|G|T|P|Ki|Mi|Gi|Ti)?(?:byte|B)$")
_COUNT = re.compile(r"^(K|M|G|T|P)?(?:inst|warp|thread)?$")

Quantity = Literal["seconds", "bytes", "count"]


def _quantity(metric: str) -> Quantity:
    if metric == TIME:
        return "seconds"
    if metric.startswith("dram__bytes"):
        return "bytes"
    return "count"


def unit_scale(unit: str, quantity: Quantity) -> float:
    """Return the factor that turns a value printed in ``unit`` into s, bytes or a count.

    ncu prints units scaled by SI factors (``Kbyte`` = 1000 bytes, ``usecond``) unless run with
    ``--print-units base``; binary prefixes (``KiB``) are read as such.

    Raises:
        InvalidInputError: ``unit`` is not one of ``quantity``'s.
    """
    if quantity == "seconds" and unit in _SECONDS:
        return _SECONDS[unit]
    pattern = _BYTES if quantity == "bytes" else _COUNT if quantity == "count" else None
    found = pattern.match(unit) if pattern is not None else None
    if found is None:
        raise InvalidInputError(f"unit {unit!r} is not one of {quantity}")
    prefix = found.group(1) or ""
    return _BINARY.get(prefix) or _PREFIXES[prefix]


def fp_flops(add: float | None, mul: float | None, fma: float | None) -> int | None:
    """Return the FLOPs of add, mul and fma thread instructions: add + mul + 2 × fma.

    None where any count is unknown.
    """
    if add is None or mul is None or fma is None:
        return None
    return round(add + mul + 2 * fma)


@dataclass(frozen=True)
class Kernel:
    """One profiled kernel: the configuration whose range it ran in, its device, its metrics."""

    key: str | None
    """The configuration key of its innermost ``opdb:`` NVTX range; None outside any."""
    device: str | None
    """The device's name (``device__attribute_display_name``), None where not in the CSV."""
    values: dict[str, float | None]
    """Each metric of :data:`METRICS` the CSV has (but the device name), in s, bytes or counts;
    None where the kernel has no value."""
    process: str = ""


@dataclass
class Profile:
    """What a raw CSV holds: its kernels in launch order and the metrics it has."""

    source: str
    metrics: tuple[str, ...]
    kernels: list[Kernel]


def _number(text: str) -> float | None:
    """Read ``1,234.5`` (ncu groups thousands) as a float; None for ``n/a`` or nothing."""
    cleaned = text.strip().replace(",", "")
    if cleaned in ("", "n/a", "N/A", "nan"):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _header_at(rows: Sequence[list[str]], source: str) -> int:
    """Return the index of the header row: first cell ``ID``, then metric columns.

    Raises:
        InvalidInputError: there is none (not an ncu raw CSV), or it is ncu's details page.
    """
    for index, row in enumerate(rows):
        if not row or row[0].strip() != "ID":
            continue
        if "Metric Name" in row:
            raise InvalidInputError(
                f"{source}: this is ncu's details page (one row per metric); export the raw "
                "page: ncu --csv --page raw"
            )
        if any(_METRIC_COLUMN.match(c.strip()) for c in row):
            return index
    raise InvalidInputError(
        f"{source}: not an Nsight Compute raw CSV (ncu --csv --page raw): no header row of "
        '"ID" and metric columns'
    )


def parse_raw_csv(text: str, source: str) -> Profile:
    """Read ``ncu --csv --page raw`` output into its kernels, values in s, bytes and counts.

    Lines before the header (``==PROF==`` lines, the program's output) and after the kernels
    are skipped, as is any row that is not a kernel (its first cell not an integer id, or a
    different number of cells). The row after the header gives each metric's unit.

    Raises:
        InvalidInputError: not a raw CSV of ncu, no units row, a unit that cannot be read, or
            none of the metrics of :data:`METRICS` but the device name.
    """
    rows = list(csv.reader(io.StringIO(text)))
    at = _header_at(rows, source)
    header = [c.strip() for c in rows[at]]
    if at + 1 >= len(rows) or len(rows[at + 1]) != len(header) or rows[at + 1][0].strip():
        raise InvalidInputError(f"{source}: no units row after the header (ncu --page raw has one)")
    units = dict(zip(header, (u.strip() for u in rows[at + 1]), strict=True))
    present = tuple(m for m in METRICS if m in units and m != DEVICE_NAME)
    if not present:
        raise InvalidInputError(
            f"{source}: none of the metrics opdb reads ({TIME}, {DRAM_READ}, ...): profile with "
            "the command `opdb ncu command MODEL` prints"
        )
    scales: dict[str, float] = {}
    for metric in present:
        try:
            scales[metric] = unit_scale(units[metric], _quantity(metric))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{source}: column {metric}: {exc}") from None
    identity = [i for i, name in enumerate(header) if not _METRIC_COLUMN.match(name)]
    column = {name: i for i, name in enumerate(header)}
    kernels = []
    for row in rows[at + 2 :]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue
        values = {}
        for metric in present:
            value = _number(row[column[metric]])
            values[metric] = None if value is None else value * scales[metric]
        key = next(
            (k for i in reversed(identity) if (k := key_of_nvtx_range(row[i])) is not None), None
        )
        device = row[column[DEVICE_NAME]].strip() if DEVICE_NAME in column else ""
        process = row[column["Process ID"]].strip() if "Process ID" in column else ""
        kernels.append(Kernel(key, device or None, values, process))
    return Profile(source, present, kernels)


def _total(values: Iterable[float | None]) -> float | None:
    """Return the sum, or None where any value is unknown."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def call_figures(kernels: Sequence[Kernel], metrics: Sequence[str]) -> CounterFigures:
    """Return the counters of one call: each metric summed over its kernels.

    A metric the CSV lacks, or that a kernel has no value of, is None.
    """

    def total(metric: str) -> float | None:
        return _total(k.values[metric] for k in kernels) if metric in metrics else None

    def count(metric: str) -> int | None:
        value = total(metric)
        return None if value is None else round(value)

    flops = {p: fp_flops(*(total(m) for m in names)) for p, names in PRECISIONS.items()}
    return CounterFigures(
        kernels=len(kernels),
        gpu_time_s=total(TIME),
        dram_read_bytes=count(DRAM_READ),
        dram_write_bytes=count(DRAM_WRITE),
        flops_fp32=flops["fp32"],
        flops_fp16=flops["fp16"],
        flops_fp64=flops["fp64"],
        tensor_instructions=count(TENSOR),
    )


@dataclass
class ImportSummary:
    """What an import found and stored."""

    source: str
    kernels: int = 0
    stored: dict[str, int] = field(default_factory=dict)
    """Configurations stored, by device kind."""
    outside: int = 0
    """Kernels outside every ``opdb:`` range (the profiler's own, another program's)."""
    unknown: int = 0
    """Ranges naming a configuration the database does not hold."""
    repeated: int = 0
    """Configurations profiled more than once in the file: the last call is kept."""

    def line(self) -> str:
        """Return the summary as one line."""
        kinds = ", ".join(f"{n} configurations on {k}" for k, n in sorted(self.stored.items()))
        return (
            f"{self.source}: {self.kernels} kernels; counters of {kinds or '0 configurations'} "
            f"stored; {self.outside} kernels outside any opdb range, {self.unknown} ranges of "
            f"configurations not in the database, {self.repeated} configurations profiled more "
            "than once (the last call kept)"
        )


def _calls(profile: Profile) -> tuple[dict[tuple[str, str], list[Kernel]], int, int]:
    """Group the kernels into calls: a run of kernels of one range in one process and device.

    Return the last call of each (device, key), the kernels outside any range, and how many
    (device, key) had more than one call.
    """
    calls: dict[tuple[str, str], list[Kernel]] = {}
    seen: set[tuple[str, str]] = set()
    repeated: set[tuple[str, str]] = set()
    outside = 0
    previous: tuple[str, str, str] | None = None
    for kernel in profile.kernels:
        if kernel.key is None:
            outside += 1
            previous = None
            continue
        target = (kernel.device or "", kernel.key)
        if previous != (*target, kernel.process):  # a new call of the range
            if target in seen:
                repeated.add(target)
            seen.add(target)
            calls[target] = []
        calls[target].append(kernel)
        previous = (*target, kernel.process)
    return calls, outside, len(repeated)


def import_counters(
    session: Session, text: str, source: str, *, device_kind: str | None = None
) -> ImportSummary:
    """Store the counters of every configuration a raw ncu CSV profiled; return what was done.

    The device kind of a kernel is its CSV's device name (``device__attribute_display_name``:
    the name NVML gives the GPU, as the worker names its kind; a new kind is registered), else
    ``device_kind`` (which must exist). Kernels outside any ``opdb:`` range and ranges of
    configurations not in the database are counted, not fatal. Everything is checked before
    anything is added; flushes, the caller commits.

    Raises:
        InvalidInputError: not an ncu raw CSV (see :func:`parse_raw_csv`); no device name in it
            and no ``device_kind``; or a device name that contradicts ``device_kind``.
        NotFoundError: ``device_kind`` does not exist.
    """
    profile = parse_raw_csv(text, source)
    calls, outside, repeated = _calls(profile)
    summary = ImportSummary(source, len(profile.kernels), outside=outside, repeated=repeated)
    names = {device for device, _ in calls}
    if "" in names and device_kind is None:
        raise InvalidInputError(
            f"{source}: no {DEVICE_NAME} column to tell the GPU: name it with --device-kind"
        )
    wrong = sorted(n for n in names if n and device_kind is not None and n != device_kind)
    if wrong:
        raise InvalidInputError(
            f"{source}: profiled on {', '.join(wrong)}, not on {device_kind!r} (--device-kind)"
        )
    given = queries.get_device_kind(session, device_kind) if device_kind is not None else None
    ids = queries.config_ids_by_key(session, [key for _, key in calls])
    by_device: dict[str, dict[int, CounterFigures]] = {}
    for (device, key), kernels in calls.items():
        if key not in ids:
            summary.unknown += 1
            continue
        by_device.setdefault(device, {})[ids[key]] = call_figures(kernels, profile.metrics)
    for device, figures in sorted(by_device.items()):
        kind = queries.get_or_create_device_kind(session, device, "gpu") if device else given
        assert kind is not None  # a kernel without a device name needs device_kind (above)
        queries.add_counters(session, kind.id, figures, source=source)
        summary.stored[kind.name] = summary.stored.get(kind.name, 0) + len(figures)
    return summary


def read_csv_text(path: Path) -> str:
    """Return the text of the CSV at ``path``.

    Raises:
        InvalidInputError: it cannot be read, or is not UTF-8 text.
        TooLargeError: it is over :data:`MAX_CSV_BYTES`.
    """
    try:
        size = path.stat().st_size
        if size > MAX_CSV_BYTES:
            raise TooLargeError(f"{path}: {size} bytes, over the {MAX_CSV_BYTES} bytes read")
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path}: not UTF-8 text (an ncu CSV is)") from None
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def ncu_command(
    model: str,
    *,
    output: str,
    device: str = "nvidia",
    db: str | None = None,
    ncu: str = "ncu",
) -> list[str]:
    """Return the command line that profiles each configuration of ``model`` once into a CSV.

    ncu runs ``opdb ncu probe MODEL``, which calls each configuration once inside its NVTX range
    after a warm-up, and profiles only the kernels inside ``opdb:`` ranges (``--nvtx-include``),
    with :data:`METRICS`, caches flushed and clocks at base before each kernel (ncu's defaults,
    named), units unscaled, the raw page as CSV into ``output``.
    """
    probe = ["opdb", "ncu", "probe", model, "--device", device]
    if db is not None:
        probe += ["--db", db]
    return [
        ncu,
        "--nvtx",
        "--nvtx-include",
        f"regex:{NVTX_RANGE_REGEX}/",
        "--print-nvtx-rename",
        "kernel",
        "--metrics",
        ",".join(METRICS),
        "--cache-control",
        "all",
        "--clock-control",
        "base",
        "--target-processes",
        "all",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        output,
        *probe,
    ]


def shell_line(argv: Sequence[str]) -> str:
    """Return ``argv`` as one line a POSIX shell runs as it is."""
    return shlex.join(argv)
