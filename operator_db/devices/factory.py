"""Open the device a setting or an option names: auto, cpu, nvidia[:N], cuda[:N], fake."""

from __future__ import annotations

import logging
import re
from typing import Any

from operator_db.config import Settings, get_settings
from operator_db.devices.base import Device
from operator_db.devices.cpu import CpuDevice
from operator_db.devices.cuda import cuda_unavailable_reason
from operator_db.devices.fake import FAKE_OPERATIONS, FakeDevice
from operator_db.devices.nvidia import NvidiaDevice
from operator_db.devices.nvml import nvml_available
from operator_db.errors import ConfigurationError, DeviceError, OperatorDBError

logger = logging.getLogger(__name__)

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

    ``nvidia:N`` (``cuda:N``, ``gpu:N``) is torch's ``cuda:N``, as numbered under
    ``CUDA_VISIBLE_DEVICES``. ``auto`` opens it when torch has CUDA and NVML works and sees a GPU,
    else the CPU (logging why where NVML sees a GPU that torch cannot use). ``index`` is used when
    the spec has none. Close the device (or use it as a context manager) when done.

    Raises:
        ConfigurationError: unknown spec or fake settings.
        DeviceUnsupportedError: nvidia where torch has no CUDA (a CPU-only build, ...), or
            ``NVML unavailable: <reason>``.
        DeviceError: the device could not be opened.
    """
    if spec is None:
        settings = settings or get_settings()
        spec = settings.device
    backend, spec_index = parse_device_spec(spec)
    gpu_index = index if spec_index is None else spec_index
    if backend == "auto":
        ok, nvml_says = nvml_available()
        cuda_reason = cuda_unavailable_reason()
        if ok and cuda_reason is None:
            return NvidiaDevice(gpu_index)
        if ok:
            logger.warning(
                "device auto: NVML sees %s, but %s; using the CPU", nvml_says, cuda_reason
            )
        return CpuDevice()
    if backend == "cpu":
        return CpuDevice()
    if backend == "nvidia":
        return NvidiaDevice(gpu_index)
    return fake_from_settings(settings or get_settings())
