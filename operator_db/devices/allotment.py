"""How many CPU cores this process may use: its affinity mask and its cgroup's CPU quota.

A VM or container is sold a few cores of a big socket: the spec sheet's FLOP/s are the whole
socket's, so a roof for this process has to be scaled to its allotment (docs/peaks.md, "CPU
roofs"). Every reader takes its paths so tests can hand it temporary files; nothing here imports
torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

LimitedBy = Literal["affinity", "cgroup quota"]


@dataclass(frozen=True)
class CpuQuota:
    """A cgroup CPU bandwidth limit: ``quota_us`` of CPU time every ``period_us``."""

    quota_us: int
    period_us: int
    path: str
    """The file that set it (``cpu.max``, or ``cpu.cfs_quota_us`` for cgroup v1)."""

    @property
    def cpus(self) -> float:
        """The quota in CPUs: CPU time per wall time (1.5 = one and a half CPUs busy at most)."""
        return self.quota_us / self.period_us


@dataclass(frozen=True)
class CpuAllotment:
    """The CPUs this process may run on and the CPU time its cgroup may spend.

    ``usable_cores`` is the smaller of the two. A logical CPU counts as a core: inside a VM the
    hypervisor's vCPU may be an SMT thread of a host core, which the guest cannot see
    (docs/peaks.md).
    """

    affinity_cpus: int
    """Logical CPUs in this process's affinity mask (``os.sched_getaffinity``)."""
    quota: CpuQuota | None
    """The tightest cgroup quota over the process's cgroup and its ancestors; None: unlimited."""
    logical_cpus: int | None = None
    """Logical CPUs of the machine (``os.cpu_count()``), for context."""

    @property
    def usable_cores(self) -> float:
        """Cores this process may keep busy: min(affinity CPUs, quota CPUs); may be fractional."""
        if self.quota is None:
            return float(self.affinity_cpus)
        return min(float(self.affinity_cpus), self.quota.cpus)

    @property
    def limited_by(self) -> LimitedBy:
        """Which of the two sets ``usable_cores`` (``affinity`` on a tie)."""
        if self.quota is not None and self.quota.cpus < self.affinity_cpus:
            return "cgroup quota"
        return "affinity"

    def describe(self) -> str:
        """Return one line, e.g. ``2 cores (affinity: 2 of 2 logical CPUs; no cgroup quota)``."""
        quota = (
            "no cgroup quota"
            if self.quota is None
            else f"cgroup quota {self.quota.cpus:g} CPUs ({self.quota.path})"
        )
        of = f" of {self.logical_cpus}" if self.logical_cpus is not None else ""
        cores = self.usable_cores
        return (
            f"{cores:g} core{'' if cores == 1 else 's'} (affinity: {self.affinity_cpus}{of} "
            f"logical CPUs; {quota})"
        )

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready copy, ``usable_cores`` and ``limited_by`` included."""
        return {
            "usable_cores": self.usable_cores,
            "limited_by": self.limited_by,
            "affinity_cpus": self.affinity_cpus,
            "logical_cpus": self.logical_cpus,
            "quota_cpus": None if self.quota is None else self.quota.cpus,
            "quota_us": None if self.quota is None else self.quota.quota_us,
            "period_us": None if self.quota is None else self.quota.period_us,
            "quota_path": None if self.quota is None else self.quota.path,
        }


def parse_cpu_max(text: str, path: str = "cpu.max") -> CpuQuota | None:
    """Parse cgroup v2 ``cpu.max`` (``"$MAX $PERIOD"``, ``max`` = no limit).

    Raises:
        ValueError: not two fields, or numbers that are not positive integers.
    """
    fields = text.split()
    if len(fields) != 2:
        raise ValueError(f"{path}: expected '$MAX $PERIOD', got {text.strip()!r}")
    if fields[0] == "max":
        return None
    return _quota(fields[0], fields[1], path)


def parse_cfs_quota(
    quota_text: str, period_text: str, path: str = "cpu.cfs_quota_us"
) -> CpuQuota | None:
    """Parse cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (quota -1 = no limit).

    Raises:
        ValueError: numbers that are not integers, or a non-positive period.
    """
    if int(quota_text.strip()) < 0:
        return None
    return _quota(quota_text.strip(), period_text.strip(), path)


def _quota(quota: str, period: str, path: str) -> CpuQuota:
    quota_us, period_us = int(quota), int(period)
    if quota_us <= 0 or period_us <= 0:
        raise ValueError(f"{path}: quota and period must be > 0, got {quota_us} and {period_us}")
    return CpuQuota(quota_us, period_us, path)


def _ancestors(root: Path, relative: str) -> Iterator[Path]:
    """Yield ``root/relative`` and each parent up to ``root`` itself, deepest first."""
    parts = [p for p in relative.split("/") if p]
    for depth in range(len(parts), -1, -1):
        yield root.joinpath(*parts[:depth])


def _read_quota(directory: Path, v2: bool) -> CpuQuota | None:
    """Read the quota files of one cgroup directory (None: absent, unreadable or unlimited)."""
    try:
        if v2:
            path = directory / "cpu.max"
            return parse_cpu_max(path.read_text(), str(path))
        quota = directory / "cpu.cfs_quota_us"
        return parse_cfs_quota(
            quota.read_text(), (directory / "cpu.cfs_period_us").read_text(), str(quota)
        )
    except (OSError, ValueError):
        return None


def cgroup_cpu_quota(
    proc_cgroup: Path = PROC_SELF_CGROUP, cgroup_root: Path = CGROUP_ROOT
) -> CpuQuota | None:
    """Return the tightest CPU quota of this process's cgroups (v2 and v1), or None.

    Reads ``proc_cgroup`` (``/proc/self/cgroup``): a v2 line ``0::/path`` points to
    ``cpu.max`` under ``cgroup_root`` (or ``cgroup_root/unified`` on a hybrid host); a v1 line
    whose controllers include ``cpu`` points to ``cpu.cfs_quota_us`` under
    ``cgroup_root/<controllers>``. The cgroup's ancestors limit it too, so every directory from
    it up to the mount root is read (inside a container the path in ``proc_cgroup`` may not exist
    in the container's mount: the mount root is then the container's own cgroup). Unreadable
    files are skipped.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[CpuQuota] = []
    for line in lines:
        _, controllers, relative = (line.split(":", 2) + ["", ""])[:3]
        if not controllers:
            hybrid = not (cgroup_root / "cgroup.controllers").exists()
            roots = [(cgroup_root / "unified" if hybrid else cgroup_root, True)]
        elif "cpu" in controllers.split(","):
            roots = [(cgroup_root / controllers, False), (cgroup_root / "cpu", False)]
        else:
            continue
        for root, v2 in roots:
            if not root.is_dir():
                continue
            for directory in _ancestors(root, relative.strip()):
                quota = _read_quota(directory, v2)
                if quota is not None:
                    found.append(quota)
            break
    return min(found, key=lambda q: q.cpus, default=None)


def read_cpu_allotment(
    *,
    affinity: Callable[[], set[int]] | None = None,
    proc_cgroup: Path = PROC_SELF_CGROUP,
    cgroup_root: Path = CGROUP_ROOT,
    cpu_count: Callable[[], int | None] = os.cpu_count,
) -> CpuAllotment:
    """Return how many cores this process may use: its affinity mask and its cgroup quota.

    ``affinity`` returns the set of allowed logical CPUs (default ``os.sched_getaffinity(0)``;
    where that does not exist, every CPU of ``cpu_count``).
    """
    logical = cpu_count()
    if affinity is None:
        getaffinity = getattr(os, "sched_getaffinity", None)
        cpus = len(getaffinity(0)) if getaffinity is not None else (logical or 1)
    else:
        cpus = len(affinity())
    return CpuAllotment(
        affinity_cpus=max(cpus, 1),
        quota=cgroup_cpu_quota(proc_cgroup, cgroup_root),
        logical_cpus=logical,
    )
