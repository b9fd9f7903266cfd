"""The CPU: identity, thread count, and RAPL energy where readable (METHODOLOGY §2)."""

from __future__ import annotations

import os
import platform
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from operator_db.devices.allotment import CpuAllotment, read_cpu_allotment
from operator_db.devices.base import (
    Clock,
    Device,
    DeviceIdentity,
    DeviceType,
    PowerSample,
    Sleep,
    Telemetry,
)
from operator_db.devices.host_cpu import CPUINFO, read_cpu_model
from operator_db.errors import DeviceError, PermissionDeniedError

POWERCAP_ROOT = Path("/sys/class/powercap")

_TOP_ZONE = re.compile(r"intel-rapl:(\d+)")
_SUB_ZONE = re.compile(r"intel-rapl:(\d+):(\d+)")


@dataclass
class RaplZone:
    """One RAPL zone's counter, made cumulative across wrap-arounds (all values in µJ)."""

    path: Path
    label: str
    max_energy_range_uj: int
    last_raw_uj: int
    total_uj: int

    def read_uj(self) -> int:
        """Read ``energy_uj`` and return the cumulative total since the zone was opened.

        A raw value below the last one means the counter wrapped at ``max_energy_range_uj``;
        more than one wrap between two reads cannot be seen.

        Raises:
            OSError: the file could not be read.
        """
        raw = int((self.path / "energy_uj").read_text())
        if raw >= self.last_raw_uj:
            self.total_uj += raw - self.last_raw_uj
        else:
            self.total_uj += raw + self.max_energy_range_uj - self.last_raw_uj
        self.last_raw_uj = raw
        return self.total_uj


class Rapl:
    """The package and DRAM RAPL zones under a powercap root (``/sys/class/powercap``).

    Top-level zones named ``package-N`` and zones named ``dram`` are counted; ``core``,
    ``uncore`` (parts of a package) and ``psys`` (overlaps the packages) are not.
    """

    def __init__(self, root: Path = POWERCAP_ROOT) -> None:
        """Open the zones under ``root``.

        Raises:
            PermissionError, FileNotFoundError, OSError: a zone cannot be read.
            LookupError: there is no package zone.
        """
        self.root = root
        self._lock = threading.Lock()
        self.zones: list[RaplZone] = []
        if not root.is_dir():
            raise FileNotFoundError(f"{root} does not exist (no powercap/RAPL on this host)")
        packages: dict[str, str] = {}
        for path in sorted(root.iterdir(), key=lambda p: _zone_sort_key(p.name)):
            top = _TOP_ZONE.fullmatch(path.name)
            sub = _SUB_ZONE.fullmatch(path.name)
            if top is None and sub is None:
                continue
            name = (path / "name").read_text().strip()
            if top is not None and name.startswith("package"):
                packages[top.group(1)] = name
                self.zones.append(self._open_zone(path, name))
            elif name == "dram":
                parent = packages.get(sub.group(1)) if sub is not None else None
                label = f"{parent}/dram" if parent else f"dram-{path.name.split(':', 1)[1]}"
                self.zones.append(self._open_zone(path, label))
        if not packages:
            raise LookupError(f"no RAPL package zone under {root}")

    @staticmethod
    def _open_zone(path: Path, label: str) -> RaplZone:
        max_range = int((path / "max_energy_range_uj").read_text())
        raw = int((path / "energy_uj").read_text())
        return RaplZone(path, label, max_range, raw, raw)

    def read_uj(self) -> dict[str, int]:
        """Return each zone's cumulative energy in µJ, by label (``package-0``, ``package-0/dram``).

        Raises:
            OSError: a zone could not be read.
        """
        with self._lock:
            return {zone.label: zone.read_uj() for zone in self.zones}


def _zone_sort_key(name: str) -> tuple[int, ...]:
    """Sort ``intel-rapl:1:0`` after ``intel-rapl:1`` and ``intel-rapl:10`` after ``:9``."""
    parts = name.split(":")[1:]
    return tuple(int(p) if p.isdigit() else -1 for p in parts)


class CpuDevice(Device):
    """The host CPU. Energy is package + DRAM RAPL counters where readable, else unavailable."""

    device_type: ClassVar[DeviceType] = "cpu"

    def __init__(
        self,
        *,
        threads: int | None = None,
        powercap_root: Path = POWERCAP_ROOT,
        cpuinfo: Path = CPUINFO,
        allotment: CpuAllotment | None = None,
        clock: Clock = time.perf_counter_ns,
        sleep: Sleep = time.sleep,
    ) -> None:
        """Open the CPU; ``threads`` sets ``torch.set_num_threads`` (METHODOLOGY §3) when given.

        ``allotment`` (default: read from this process's affinity and cgroup) is the cores this
        process may use; it goes into the identity's ``extra`` and the provenance as
        ``cpu_allotment``, so a roof can be scaled to it (docs/peaks.md, "CPU roofs").
        """
        super().__init__(clock=clock, sleep=sleep)
        if threads is not None:
            if threads < 1:
                raise ValueError("threads must be >= 1")
            torch.set_num_threads(threads)
        model, vendor = read_cpu_model(cpuinfo)
        self.allotment = allotment if allotment is not None else read_cpu_allotment()
        self.powercap_root = powercap_root
        self._rapl: Rapl | None = None
        self._energy_reason: str | None = None
        self._energy_denied = False
        try:
            self._rapl = Rapl(powercap_root)
        except PermissionError as exc:
            self._energy_denied = True
            where = exc.filename or powercap_root
            self._energy_reason = (
                f"energy unavailable: {where} is not readable (RAPL is root-only since "
                "CVE-2020-8694; run as root or grant read access)"
            )
        except (OSError, LookupError, ValueError) as exc:
            self._energy_reason = f"energy unavailable: {_one_line(exc)}"
        self._identity = DeviceIdentity(
            device_type="cpu",
            name=f"cpu:{model}",
            vendor=vendor,
            device_id="cpu",
            architecture=platform.machine() or None,
            memory_bytes=_physical_memory_bytes(),
            extra={
                "logical_cpus": os.cpu_count(),
                "rapl_zones": [z.label for z in self._rapl.zones] if self._rapl else [],
                "cpu_allotment": self.allotment.as_dict(),
            },
        )

    def identity(self) -> DeviceIdentity:
        """Return ``cpu:<model name>``, vendor, architecture (``platform.machine()``), memory."""
        return self._identity

    def threads(self) -> int:
        """Return the number of threads torch uses for intra-op parallelism now."""
        return torch.get_num_threads()

    def torch_device(self) -> torch.device:
        """Return ``cpu``."""
        return torch.device("cpu")

    def synchronize(self) -> None:
        """Do nothing: CPU operators are synchronous."""

    def energy_breakdown_uj(self) -> dict[str, int] | None:
        """Return cumulative µJ per RAPL zone, or None when RAPL is unavailable.

        Raises:
            PermissionDeniedError: a zone became unreadable. DeviceError: another read failure.
        """
        if self._rapl is None:
            return None
        try:
            return self._rapl.read_uj()
        except PermissionError as exc:
            raise PermissionDeniedError(f"RAPL counter not readable: {_one_line(exc)}") from exc
        except (OSError, ValueError) as exc:
            raise DeviceError(f"RAPL counter read failed: {_one_line(exc)}") from exc

    def energy_mj(self) -> int | None:
        """Return package + DRAM RAPL energy in mJ (cumulative, wrap-around handled), or None.

        Raises:
            PermissionDeniedError: a zone became unreadable. DeviceError: another read failure.
        """
        zones = self.energy_breakdown_uj()
        return None if zones is None else sum(zones.values()) // 1000

    def energy_unavailable_reason(self) -> str | None:
        """Say why RAPL cannot be read (missing, not permitted), or None."""
        return self._energy_reason

    def energy_permission_denied(self) -> bool:
        """Return whether RAPL exists but this process may not read it (a permission fix helps)."""
        return self._energy_denied

    def _update_probe(self) -> Callable[[], object] | None:
        if self._rapl is None:
            return None
        # Raw µJ, not mJ: an idle package can take several updates to add a millijoule.
        return lambda: tuple((self.energy_breakdown_uj() or {}).values())

    def power_mw(self) -> PowerSample | None:
        """Return None: there is no instant CPU power sensor; energy comes from RAPL."""
        return None

    def power_unavailable_reason(self) -> str | None:
        """Say that CPUs have no instant power reading here."""
        return "power unavailable: no instant power sensor on the CPU; energy comes from RAPL"

    def telemetry(self) -> Telemetry:
        """Return a timestamp only: clocks and temperatures are not read on CPUs yet."""
        return Telemetry(timestamp_us=self.timestamp_us())

    def provenance(self) -> dict[str, Any]:
        """Return the common provenance plus logical CPU count, allotment and RAPL zones."""
        out = super().provenance()
        out["logical_cpus"] = os.cpu_count()
        out["cpu_allotment"] = self.allotment.as_dict()
        out["rapl_zones"] = self._identity.extra["rapl_zones"]
        return out


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
