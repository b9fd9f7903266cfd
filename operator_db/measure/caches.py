"""Caches between calls: the CPU's cache levels as this process sees them, and cold mode's flush.

Cold mode (``OPDB_MEASURE__CACHE_MODE=cold``) writes a buffer larger than the last-level cache
between calls (:func:`cache_flush`); the peak microbenchmarks size their cache roofs from
:func:`cache_levels`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from operator_db.devices.base import Device

Call = Callable[[], object]
"""A call between timed calls (the flush), as :data:`operator_db.measure.timing.Call`."""

GPU_FLUSH_BYTES = 256 << 20
"""Cold mode on a GPU: bytes written between calls (Triton's ``do_bench``; H100 L2 is 50 MB)."""
CPU_FLUSH_FALLBACK_BYTES = 64 << 20
"""Cold mode on a CPU whose last-level cache size cannot be read."""


@dataclass(frozen=True)
class CacheLevel:
    """A CPU cache level as the cores of this process see it."""

    level: int
    capacity_bytes: int
    """What the level holds for those cores: every instance they use, summed."""
    instances: int
    """Distinct instances of the level among the cores (L2: one per core; L3: one per CCX)."""


def _size_bytes(text: str) -> int | None:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def cache_levels(
    cpus: Iterable[int] | None = None, sysfs: str = "/sys/devices/system/cpu"
) -> list[CacheLevel]:
    """Return the data and unified cache levels the CPUs ``cpus`` use (default: this process's).

    Read from Linux sysfs (``cpuN/cache/indexK``); a level shared by several of the CPUs (an L3)
    counts once per instance. Empty where sysfs says nothing.
    """
    chosen = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    seen: dict[int, dict[str, int]] = {}
    for cpu in chosen:
        for index in sorted(Path(sysfs, f"cpu{cpu}", "cache").glob("index*")):
            try:
                kind = (index / "type").read_text().strip()
                level = int((index / "level").read_text())
                size = _size_bytes((index / "size").read_text())
                shared = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind == "Instruction" or size is None:
                continue
            seen.setdefault(level, {})[shared or str(cpu)] = size
    return [
        CacheLevel(level, sum(found.values()), len(found)) for level, found in sorted(seen.items())
    ]


def last_level_cache_bytes(sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Return the CPU's largest cache in bytes (Linux sysfs), or None where it cannot be read."""
    sizes = []
    for index in sorted(Path(sysfs).glob("index*")):
        try:
            size = _size_bytes((index / "size").read_text())
        except OSError:
            continue
        if size is not None:
            sizes.append(size)
    return max(sizes) if sizes else None


def cache_flush(device: Device, nbytes: int | None = None) -> Call:
    """Return a call that flushes the device's caches by writing ``nbytes`` bytes.

    Default size: :data:`GPU_FLUSH_BYTES` on a GPU, twice the last-level cache on a CPU. The
    buffer is allocated once; each flush writes it whole (``zero_``), evicting what the last call
    left in the caches.
    """
    dev = device.torch_device()
    if nbytes is None:
        if dev.type == "cuda":
            nbytes = GPU_FLUSH_BYTES
        else:
            nbytes = 2 * (last_level_cache_bytes() or CPU_FLUSH_FALLBACK_BYTES // 2)
    buffer = torch.empty(nbytes, dtype=torch.int8, device=dev)

    def flush() -> object:
        return buffer.zero_()

    return flush
