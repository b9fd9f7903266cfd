"""A simulated NVML host behind a stand-in ``pynvml`` module whose functions are autospecced.

Only the functions the adapter is meant to use exist on the stand-in, each with the real
function's signature (``create_autospec``), so a wrong call or an unexpected function fails.
Constants, ``NVMLError`` and its subclasses, and the result structs are the real ones.

``SimCuda`` is torch.cuda as a process on the simulated host sees it: only the GPUs that
``CUDA_VISIBLE_DEVICES`` leaves, renumbered from 0 in its order.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pynvml as real
import pytest
import torch

GIB = 1024**3


@dataclass
class SimGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-01234567-89ab-cdef-0123-456789abcdef"
    arch: int = real.NVML_DEVICE_ARCH_HOPPER
    energy_mj: int = 5_000_000
    energy_fn: Callable[[], int] | None = None  # overrides energy_mj when set
    power_mw: int = 250_000
    power_fn: Callable[[], int] | None = None  # overrides power_mw when set
    power_timestamp_us: int = 1_700_000_000_000_000
    power_timestamp_fn: Callable[[], int] | None = None  # overrides power_timestamp_us when set
    field_scopes: set[int] = field(default_factory=lambda: {real.NVML_POWER_SCOPE_GPU})
    field_returns: dict[int, int] = field(default_factory=dict)  # scope -> per-field nvmlReturn
    c2c_enabled: bool | None = None  # None: the driver answers NOT_SUPPORTED
    power_usage_mw: int = 240_000
    memory_total: int = 80 * GIB
    compute_capability: tuple[int, int] = (9, 0)
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    temperature_c: int = 41
    power_limit_mw: int = 700_000
    default_power_limit_mw: int = 700_000
    app_clocks_restricted: bool = True  # nvmlDeviceGetAPIRestriction(SET_APPLICATION_CLOCKS)
    clock_event_reasons: int = 0
    # nvmlPerfPolicyType_t -> (referenceTime µs, violationTime ns); others are NOT_SUPPORTED
    violations: dict[int, tuple[int, int]] = field(default_factory=dict)


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
        stamp = gpu.power_timestamp_fn
        slot.timestamp = stamp() if stamp is not None else gpu.power_timestamp_us
        slot.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
        if scope in gpu.field_returns:
            slot.nvmlReturn = gpu.field_returns[scope]
        elif field_id == real.NVML_FI_DEV_POWER_INSTANT and scope in gpu.field_scopes:
            slot.nvmlReturn = real.NVML_SUCCESS
            slot.value.uiVal = gpu.power_fn() if gpu.power_fn is not None else gpu.power_mw
        else:
            slot.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
    return values


def _energy(gpu: SimGpu) -> int:
    return gpu.energy_fn() if gpu.energy_fn is not None else gpu.energy_mj


def _by_uuid(host: SimHost, uuid: str) -> SimGpu:
    for gpu in host.gpus:
        if gpu.uuid == uuid:
            return gpu
    raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)


def _index(host: SimHost, gpu: SimGpu) -> int:
    return next(i for i, g in enumerate(host.gpus) if g is gpu)


def _c2c(gpu: SimGpu) -> Any:
    if gpu.c2c_enabled is None:
        raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
    return real.c_nvmlC2cModeInfo_v1_t(isC2cEnabled=int(gpu.c2c_enabled))


def _violation(gpu: SimGpu, policy: int) -> Any:
    if policy not in gpu.violations:
        raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
    reference_us, violation_ns = gpu.violations[policy]
    return real.c_nvmlViolationTime_t(referenceTime=reference_us, violationTime=violation_ns)


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "nvmlInit": lambda host: None,
    "nvmlShutdown": lambda host: None,
    "nvmlDeviceGetCount": lambda host: len(host.gpus),
    "nvmlDeviceGetHandleByIndex": lambda host, index: host.gpus[index],
    "nvmlDeviceGetHandleByUUID": _by_uuid,
    "nvmlDeviceGetIndex": _index,
    "nvmlDeviceGetC2cModeInfoV": lambda host, gpu: _c2c(gpu),
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
    "nvmlDeviceGetTemperatureV": lambda host, gpu, sensor, version=None: gpu.temperature_c,
    "nvmlDeviceGetEnforcedPowerLimit": lambda host, gpu: gpu.power_limit_mw,
    "nvmlDeviceGetPowerManagementDefaultLimit": lambda host, gpu: gpu.default_power_limit_mw,
    "nvmlDeviceGetAPIRestriction": lambda host, gpu, api: int(
        gpu.app_clocks_restricted and api == real.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
    ),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda host, gpu: gpu.clock_event_reasons,
    "nvmlDeviceGetCurrentClocksThrottleReasons": lambda host, gpu: gpu.clock_event_reasons,
    "nvmlDeviceGetViolationStatus": lambda host, gpu, policy: _violation(gpu, policy),
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


class _SimUuid:
    """Like torch's ``_CUuuid``: not a str; its text is the UUID without NVML's ``GPU-``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass
class SimCuda:
    """torch.cuda on ``host``: ``visible`` lists NVML indices in CUDA order (CUDA_VISIBLE_DEVICES).

    ``visible=None`` shows every GPU in NVML order; ``available=False`` is a torch without CUDA.
    Records ``set_device`` and ``synchronize`` calls.
    """

    host: SimHost
    visible: list[int] | None = None
    available: bool = True
    current: int = 0
    set_device_calls: list[int] = field(default_factory=list)
    synchronized: list[Any] = field(default_factory=list)

    def gpus(self) -> list[SimGpu]:
        indices = self.visible if self.visible is not None else range(len(self.host.gpus))
        return [self.host.gpus[i] for i in indices]

    def is_available(self) -> bool:
        return self.available and bool(self.gpus())

    def device_count(self) -> int:
        return len(self.gpus()) if self.available else 0

    def get_device_properties(self, device: int | torch.device) -> Any:
        index = device if isinstance(device, int) else device.index
        assert index is not None and 0 <= index < self.device_count(), "Invalid device id"
        gpu = self.gpus()[index]
        return types.SimpleNamespace(name=gpu.name, uuid=_SimUuid(gpu.uuid.removeprefix("GPU-")))

    def set_device(self, device: int | torch.device) -> None:
        index = device if isinstance(device, int) else device.index
        assert index is not None and 0 <= index < self.device_count(), "Invalid device id"
        self.set_device_calls.append(index)
        self.current = index

    def synchronize(self, device: Any = None) -> None:
        self.synchronized.append(device)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace torch.cuda's functions the device path calls with this simulation."""
        for name in (
            "is_available",
            "device_count",
            "get_device_properties",
            "set_device",
            "synchronize",
        ):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
