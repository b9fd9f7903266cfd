"""Open the device a setting or an option names: auto, cpu, nvidia[:N], cuda[:N], fake."""

from __future__ import annotations

import re
from typing import Any

from operator_db.config import Settings, get_settings
from operator_db.devices.base import Device
from operator_db.devices.cpu import CpuDevice
from operator_db.devices.fake import FAKE_OPERATIONS, FakeDevice
from operator_db.devices.nvidia import NvidiaDevice
from operator_db.devices.nvml import nvml_available
from operator_db.errors import ConfigurationError, DeviceError, OperatorDBError

_SPEC = re.compile(r"(?P<backend>auto|cpu|fake|nvidia|cuda|gpu)(?::(?P<index>\d+))?")


def parse_device_spec(spec: str) -> tuple[str, int | None]:
    """Split ``"cuda:1"`` into ``("nvidia", 1)``; ``nvidia``, ``cuda`` and ``gpu`` are synonyms.

    Raises:
        ConfigurationError: not a known device spec.
    """
    match = _SPEC.fullmatch(spec.strip().lower())
    if match is None:
        raise ConfigurationError(
            f"unknown device {spec!r}; expected auto, cpu, nvidia[:N], cuda[:N] or fake"
        )
    backend = match["backend"]
    if backend in ("cuda", "gpu"):
        backend = "nvidia"
    index = int(match["index"]) if match["index"] is not None else None
    if index is not None and backend != "nvidia":
        raise ConfigurationError(f"device {spec!r}: only nvidia/cuda devices take an index")
    return backend, index


def fake_from_settings(settings: Settings, **overrides: Any) -> FakeDevice:
    """Build the fake device the ``fake_*`` settings describe; ``overrides`` go to FakeDevice.

    Raises:
        ConfigurationError: ``fake_fail`` names an unknown operation.
        DeviceError: ``fake_fail`` contains ``open``.
    """
    ops = [op.strip() for op in settings.fake_fail.split(",") if op.strip()]
    unknown = [op for op in ops if op not in FAKE_OPERATIONS]
    if unknown:
        raise ConfigurationError(
            f"fake_fail: unknown operation(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(FAKE_OPERATIONS)}"
        )
    fail_on: dict[str, OperatorDBError] = {
        op: DeviceError(f"fake device: injected failure in {op} (fake_fail setting)") for op in ops
    }
    kwargs: dict[str, Any] = {
        "power_mw": settings.fake_power_w * 1000,
        "update_period_s": settings.fake_update_period_s,
        "has_energy_counter": settings.fake_energy_counter,
        "fail_on": fail_on,
    }
    kwargs.update(overrides)
    return FakeDevice(**kwargs)


def open_device(
    spec: str | None = None, *, index: int = 0, settings: Settings | None = None
) -> Device:
    """Open the device ``spec`` names (default: the ``device`` setting).

    ``auto`` opens NVIDIA GPU ``index`` when NVML works and sees a GPU, else the CPU. ``index`` is
    used when the spec has none. Close the device (or use it as a context manager) when done.

    Raises:
        ConfigurationError: unknown spec or fake settings.
        DeviceUnsupportedError: ``NVML unavailable: <reason>`` for nvidia on a host without it.
        DeviceError: the device could not be opened.
    """
    if spec is None:
        settings = settings or get_settings()
        spec = settings.device
    backend, spec_index = parse_device_spec(spec)
    gpu_index = index if spec_index is None else spec_index
    if backend == "auto":
        ok, _ = nvml_available()
        return NvidiaDevice(gpu_index) if ok else CpuDevice()
    if backend == "cpu":
        return CpuDevice()
    if backend == "nvidia":
        return NvidiaDevice(gpu_index)
    return fake_from_settings(settings or get_settings())
