"""The host's CPU: what it is and how much of it this process may use.

A GPU's host stage (Python, dispatch, kernel launches) runs on the host's CPU, so a GPU's host
times belong to the CPU as much as to the GPU: the same measured model moved by 15 % between two
machines with the same GPU. Every device's provenance (stored with each host and each result)
names the CPU with :func:`host_cpu`.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from operator_db.devices.allotment import read_cpu_allotment

CPUINFO = Path("/proc/cpuinfo")
CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


def read_cpu_model(cpuinfo: Path = CPUINFO) -> tuple[str, str]:
    """Return (model name, vendor) from ``/proc/cpuinfo``, falling back to ``platform``."""
    model = vendor = ""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = " ".join(value.split())
            elif key == "vendor_id" and not vendor:
                vendor = value.strip()
            if model and vendor:
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown"
    vendors = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
    return model, vendors.get(vendor, vendor or "unknown")


def _max_mhz(cpufreq: Path, cpuinfo: Path) -> float | None:
    """Return the CPU's highest clock in MHz (cpufreq), else the clock /proc/cpuinfo shows."""
    try:
        return int(cpufreq.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "cpu MHz":
                return float(value)
    except (OSError, ValueError):
        pass
    return None


def host_cpu(cpuinfo: Path = CPUINFO, cpufreq: Path = CPUFREQ) -> dict[str, Any]:
    """Return the host CPU: model, vendor, cores this process may use, logical CPUs, MHz."""
    model, vendor = read_cpu_model(cpuinfo)
    allotment = read_cpu_allotment()
    return {
        "model": model,
        "vendor": vendor,
        "usable_cores": allotment.usable_cores,
        "logical_cpus": allotment.logical_cpus,
        "max_mhz": _max_mhz(cpufreq, cpuinfo),
    }
