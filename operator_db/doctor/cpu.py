"""CPU checks: which CPU, threads, RAPL, the host allocator, what the host can measure.

RAPL is readable, or the row says why not and how to fix it.
"""

from __future__ import annotations

import os
from pathlib import Path

from operator_db.config import Settings
from operator_db.devices.base import Device
from operator_db.devices.cpu import CpuDevice
from operator_db.doctor.energy import counter_check
from operator_db.doctor.report import Check, ok, warn
from operator_db.measure.allocator import huge_pages_state, retain_freed_memory
from operator_db.measure.energy import energy_unavailable


def rapl_fix(root: Path) -> str:
    """Say how to let a non-root process read RAPL under ``root`` (a powercap directory)."""
    return (
        f"sudo chmod o+r {root}/intel-rapl:*/energy_uj {root}/intel-rapl:*:*/energy_uj (until "
        'reboot); to keep it, a udev rule: ACTION=="add", SUBSYSTEM=="powercap", '
        'RUN+="/bin/chmod o+r /sys%p/energy_uj" in /etc/udev/rules.d/99-rapl.rules; or run the '
        "worker as root"
    )


NO_RAPL = (
    "none on this host: it exposes no RAPL (a VM, or a kernel without intel_rapl; on bare metal "
    "try sudo modprobe intel_rapl_msr); times are measured, energy is not"
)


def cpu_check(device: CpuDevice) -> Check:
    """Say which CPU is measured: the device-kind name, logical CPUs, architecture, memory."""
    ident = device.identity()
    memory = f", {ident.memory_bytes / 1024**3:.0f} GiB" if ident.memory_bytes else ""
    value = (
        f"{ident.name} ({ident.extra.get('logical_cpus')} logical CPUs, "
        f"{ident.architecture}{memory})"
    )
    return ok("device", "CPU", value, **ident.as_dict())


def usable_cpus() -> int:
    """Return how many CPUs this process may run on (its affinity), else the logical count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_check(settings: Settings, start_threads: int) -> Check:
    """Say how many threads torch uses and the worker will pin; warn when more than usable CPUs.

    ``start_threads`` is ``torch.get_num_threads()`` before anything was pinned.
    """
    setting = settings.measure.threads
    worker = setting or start_threads
    cpus = usable_cpus()
    told = (
        f"OPDB_MEASURE__THREADS={setting}"
        if setting
        else f"OPDB_MEASURE__THREADS unset: the worker keeps {start_threads}"
    )
    value = f"torch uses {start_threads}, the worker {worker} ({told}); {cpus} CPU(s) usable"
    data = {"torch_threads": start_threads, "setting": setting, "worker": worker, "usable": cpus}
    if worker > cpus:
        return warn(
            "threads",
            "threads",
            value,
            f"more threads than CPUs: times would be noisy; set OPDB_MEASURE__THREADS={cpus} or "
            "fewer",
            **data,
        )
    return ok("threads", "threads", value, **data)


def rapl_check(device: CpuDevice, timeout_s: float) -> Check:
    """Say whether RAPL is readable (zones, update period) or why not, with the fix.

    warn where it is not: times are right, energy is unavailable.
    """
    zones = device.identity().extra.get("rapl_zones", [])
    if device.energy_unavailable_reason() is None:
        check = counter_check(device, timeout_s, title="RAPL")
        return ok(
            check.name,
            check.title,
            f"readable: {', '.join(zones)}; {check.value}",
            **check.data,
            zones=zones,
        )
    fix = rapl_fix(device.powercap_root) if device.energy_permission_denied() else NO_RAPL
    return counter_check(device, timeout_s, title="RAPL", fix=fix)


def allocator_check(settings: Settings) -> Check:
    """Keep freed memory in the process as the worker does, and say whether that worked.

    The value also says whether this process started with its heap on huge pages, and the
    kernel's THP mode: ``opdb doctor`` starts as the measuring commands do
    (``operator_db/cli/process_env.py``). warn: the setting is off, or glibc's mallopt refused;
    whole models then pay page faults that operators timed alone do not (docs/measurement.md,
    "Host memory on the CPU").
    """
    if not settings.measure.retain_freed_memory:
        return warn(
            "allocator",
            "host allocator",
            "freed memory is returned to the kernel (OPDB_MEASURE__RETAIN_FREED_MEMORY=false)",
            "whole models pay page faults that operators looped alone do not; leave the setting "
            "on unless you mean to measure that",
            retain_freed_memory=False,
        )
    pages = huge_pages_state()
    state = f"{retain_freed_memory()}; {pages}"
    if state.startswith("unchanged"):
        return warn(
            "allocator",
            "host allocator",
            state,
            "whole models pay page faults that operators looped alone do not (no glibc here)",
            retain_freed_memory=True,
            state=state,
        )
    return ok(
        "allocator",
        "host allocator",
        state,
        retain_freed_memory=True,
        state=state,
        huge_pages=pages.startswith("huge pages asked"),
    )


def measurable_check(device: Device, settings: Settings) -> Check:
    """Say what this host can measure: time always; energy from a counter, power, or not."""
    counter = device.energy_unavailable_reason() is None
    power = device.power_unavailable_reason() is None
    if not settings.measure.energy:
        energy = "off (OPDB_MEASURE__ENERGY=false)"
    elif counter and power:
        energy = "yes (counter, cross-checked with integrated power)"
    elif counter:
        energy = "yes (counter)"
    elif power:
        energy = "yes (integrated power; no counter)"
    else:
        reason = energy_unavailable(device) or "no counter and no power reading"
        energy = f"no ({reason.removeprefix('energy unavailable: ')})"
    return ok(
        "measurable",
        "can measure",
        f"time: yes; energy: {energy}",
        time=True,
        energy=settings.measure.energy and (counter or power),
    )
