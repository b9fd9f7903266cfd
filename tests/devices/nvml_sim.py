"""A simulated NVML host behind a stand-in ``pynvml`` module whose functions are autospecced.

Only the functions the adapter is meant to use exist on the stand-in, each with the real
function's signature (``create_autospec``), so a wrong call or an unexpected function fails.
Constants, ``NVMLError`` and its subclasses, and ``c_nvmlFieldValue_t`` are the real ones.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pynvml as real

GIB = 1024**3


@dataclass
class SimGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-01234567-89ab-cdef-0123-456789abcdef"
    arch: int = real.NVML_DEVICE_ARCH_HOPPER
    energy_mj: int = 5_000_000
    energy_fn: Callable[[], int] | None = None  # overrides energy_mj when set
    power_mw: int = 250_000
    power_timestamp_us: int = 1_700_000_000_000_000
    field_scopes: set[int] = field(default_factory=lambda: {real.NVML_POWER_SCOPE_GPU})
    power_usage_mw: int = 240_000
    memory_total: int = 80 * GIB
    compute_capability: tuple[int, int] = (9, 0)
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    temperature_c: int = 41
    power_limit_mw: int = 700_000
    clock_event_reasons: int = 0


@dataclass
class SimHost:
    gpus: list[SimGpu] = field(default_factory=lambda: [SimGpu()])
    driver_version: str = "550.54.15"
    nvml_version: str = "12.550.54.15"
    cuda_driver_version: int = 12040
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code


def _field_values(gpu: SimGpu, ids: list[Any]) -> Any:
    values = (real.c_nvmlFieldValue_t * len(ids))()
    for slot, (field_id, scope) in zip(values, ids, strict=True):
        slot.fieldId = field_id
        slot.scopeId = scope
        slot.timestamp = gpu.power_timestamp_us
        slot.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
        if field_id == real.NVML_FI_DEV_POWER_INSTANT and scope in gpu.field_scopes:
            slot.nvmlReturn = real.NVML_SUCCESS
            slot.value.uiVal = gpu.power_mw
        else:
            slot.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
    return values


def _energy(gpu: SimGpu) -> int:
    return gpu.energy_fn() if gpu.energy_fn is not None else gpu.energy_mj


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "nvmlInit": lambda host: None,
    "nvmlShutdown": lambda host: None,
    "nvmlDeviceGetCount": lambda host: len(host.gpus),
    "nvmlDeviceGetHandleByIndex": lambda host, index: host.gpus[index],
    "nvmlSystemGetDriverVersion": lambda host: host.driver_version,
    "nvmlSystemGetNVMLVersion": lambda host: host.nvml_version,
    "nvmlSystemGetCudaDriverVersion": lambda host: host.cuda_driver_version,
    "nvmlDeviceGetName": lambda host, gpu: gpu.name,
    "nvmlDeviceGetUUID": lambda host, gpu: gpu.uuid,
    "nvmlDeviceGetArchitecture": lambda host, gpu: gpu.arch,
    "nvmlDeviceGetMemoryInfo": lambda host, gpu, version=None: types.SimpleNamespace(
        total=gpu.memory_total, used=0, free=gpu.memory_total
    ),
    "nvmlDeviceGetCudaComputeCapability": lambda host, gpu: gpu.compute_capability,
    "nvmlDeviceGetPciInfo": lambda host, gpu: types.SimpleNamespace(busId=b"00000000:18:00.0"),
    "nvmlDeviceGetTotalEnergyConsumption": lambda host, gpu: _energy(gpu),
    "nvmlDeviceGetFieldValues": lambda host, gpu, ids: _field_values(gpu, ids),
    "nvmlDeviceGetPowerUsage": lambda host, gpu: gpu.power_usage_mw,
    "nvmlDeviceGetClockInfo": lambda host, gpu, kind: {
        real.NVML_CLOCK_SM: gpu.sm_clock_mhz,
        real.NVML_CLOCK_MEM: gpu.mem_clock_mhz,
    }[kind],
    "nvmlDeviceGetTemperature": lambda host, gpu, sensor: gpu.temperature_c,
    "nvmlDeviceGetEnforcedPowerLimit": lambda host, gpu: gpu.power_limit_mw,
    "nvmlDeviceGetCurrentClocksEventReasons": lambda host, gpu: gpu.clock_event_reasons,
}


def make_nvml(host: SimHost) -> Any:
    """Return a stand-in ``pynvml`` module driven by ``host``."""
    module = types.ModuleType("pynvml")
    for name, value in vars(real).items():
        constant = name.startswith(("NVML_", "nvmlClocks")) and isinstance(value, int)
        if constant or name.startswith("NVMLError") or name == "c_nvmlFieldValue_t":
            setattr(module, name, value)

    def bind(name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
        def side_effect(*args: Any, **kwargs: Any) -> Any:
            code = host.fail.get(name)
            if code is not None:
                raise real.NVMLError(code)
            return impl(host, *args, **kwargs)

        return side_effect

    for name, impl in IMPLEMENTATIONS.items():
        setattr(
            module,
            name,
            mock.create_autospec(getattr(real, name), side_effect=bind(name, impl)),
        )
    return module
