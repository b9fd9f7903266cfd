"""NVIDIA GPUs through nvidia-ml-py: energy counter, field-186 power, telemetry (METHODOLOGY §1)."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from operator_db.devices.base import (
    Clock,
    Device,
    DeviceIdentity,
    DeviceType,
    PowerSample,
    Sleep,
    Telemetry,
)
from operator_db.devices.nvml import as_text, import_pynvml, nvml_errors
from operator_db.errors import (
    DeviceError,
    DeviceUnsupportedError,
    OperatorDBError,
    PermissionDeniedError,
)

FIELD_POWER_INSTANT = 186
"""``NVML_FI_DEV_POWER_INSTANT``: instant power in mW, with its own timestamp."""

ARCH_VOLTA = 5
ARCH_AMPERE = 7
ARCHITECTURES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
ARCH_UNKNOWN = 0xFFFFFFFF

# GA100 boards (A100, A30, A800): nvmlDeviceGetPowerUsage is still an instant reading there.
_GA100_NAME = re.compile(r"\bA(100|30|800)\b")

# nvmlValue_t members by nvmlValueType_t.
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def _wall_clock_us() -> int:
    return time.time_ns() // 1000


class NvidiaDevice(Device):
    """One NVIDIA GPU, by NVML index.

    Energy: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ, Volta+). Power: field 186 with scope GPU,
    else MODULE (Grace Hopper); ``nvmlDeviceGetPowerUsage`` only before Ampere and on GA100, where
    it is an instant reading (elsewhere it is a 1 s average and is not used). Power timestamps are
    NVML's host timestamps (µs since the epoch), so ``timestamp_us()`` reads the wall clock.
    """

    device_type: ClassVar[DeviceType] = "gpu"

    def __init__(
        self,
        index: int = 0,
        *,
        nvml: Any = None,
        clock: Clock = time.perf_counter_ns,
        sleep: Sleep = time.sleep,
        wall_clock_us: Callable[[], int] = _wall_clock_us,
    ) -> None:
        """Open GPU ``index`` (NVML order); ``nvml`` replaces the ``pynvml`` module (tests).

        Raises:
            DeviceUnsupportedError: ``NVML unavailable: ...`` (not installed, no driver, ...).
            DeviceError: no GPU at ``index``, or the GPU failed while being opened.
        """
        super().__init__(clock=clock, sleep=sleep)
        self.index = index
        self._wall_clock_us = wall_clock_us
        self._nvml: Any = nvml if nvml is not None else import_pynvml()
        self._initialised = False
        self._torch_index: int | None = None
        self._nvitop_device: Any = None
        self._field_scope = 0
        try:
            with nvml_errors("initialise"):
                self._nvml.nvmlInit()
        except OperatorDBError as exc:
            raise type(exc)(f"NVML unavailable: {exc}") from exc
        self._initialised = True
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # opening ----------------------------------------------------------------------------------

    def _open(self) -> None:
        nv = self._nvml
        with nvml_errors("count GPUs"):
            count = int(nv.nvmlDeviceGetCount())
        if not 0 <= self.index < count:
            raise DeviceError(f"no NVIDIA GPU at index {self.index} ({count} found)")
        with nvml_errors(f"open GPU {self.index}"):
            self._handle = nv.nvmlDeviceGetHandleByIndex(self.index)
        self._arch_code = self._optional("read the architecture", nv.nvmlDeviceGetArchitecture)
        self._identity = self._read_identity()
        self._energy_reason = self._probe_energy()
        self._power_scope, self._power_reason = self._probe_power()

    def _optional(self, action: str, function: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML getter on this GPU; None where the GPU or driver does not support it."""
        try:
            with nvml_errors(action):
                return function(self._handle, *args)
        except DeviceUnsupportedError:
            return None

    def _optional_system(self, action: str, function_name: str) -> str | None:
        function = getattr(self._nvml, function_name, None)
        if function is None:
            return None
        try:
            with nvml_errors(action):
                return as_text(function())
        except DeviceUnsupportedError:
            return None

    def _read_identity(self) -> DeviceIdentity:
        nv = self._nvml
        with nvml_errors("read the GPU name"):
            name = as_text(nv.nvmlDeviceGetName(self._handle))
        with nvml_errors("read the GPU UUID"):
            uuid = as_text(nv.nvmlDeviceGetUUID(self._handle))
        memory = self._optional("read the memory size", nv.nvmlDeviceGetMemoryInfo)
        capability = self._optional(
            "read the compute capability", nv.nvmlDeviceGetCudaComputeCapability
        )
        pci = self._optional("read the PCI bus id", nv.nvmlDeviceGetPciInfo)
        cuda_driver = None
        get_cuda = getattr(nv, "nvmlSystemGetCudaDriverVersion", None)
        if get_cuda is not None:
            try:
                with nvml_errors("read the CUDA driver version"):
                    version = int(get_cuda())
                cuda_driver = f"{version // 1000}.{version % 1000 // 10}"
            except DeviceUnsupportedError:
                pass
        extra: dict[str, Any] = {
            "index": self.index,
            "architecture_code": self._arch_code,
            "compute_capability": ".".join(str(v) for v in capability) if capability else None,
            "pci_bus_id": as_text(pci.busId) if pci is not None else None,
            "cuda_driver_version": cuda_driver,
        }
        return DeviceIdentity(
            device_type="gpu",
            name=name,
            vendor="NVIDIA",
            device_id=uuid,
            architecture=self._arch_name(),
            driver_version=self._optional_system(
                "read the driver version", "nvmlSystemGetDriverVersion"
            ),
            nvml_version=self._optional_system("read the NVML version", "nvmlSystemGetNVMLVersion"),
            memory_bytes=int(memory.total) if memory is not None else None,
            extra=extra,
        )

    def _arch_name(self) -> str | None:
        if self._arch_code is None or self._arch_code == ARCH_UNKNOWN:
            return None
        return ARCHITECTURES.get(self._arch_code, f"architecture {self._arch_code}")

    def _arch_known(self) -> bool:
        return self._arch_code is not None and self._arch_code != ARCH_UNKNOWN

    def _probe_energy(self) -> str | None:
        """Return why the energy counter cannot be used, or None when it can."""
        if self._arch_known() and self._arch_code < ARCH_VOLTA:
            return (
                "energy unavailable: the NVML energy counter needs Volta or newer; "
                f"this GPU is {self._arch_name()} (power integration is used instead)"
            )
        try:
            with nvml_errors("read the energy counter"):
                self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except (DeviceUnsupportedError, PermissionDeniedError) as exc:
            return f"energy unavailable: {exc}"
        return None

    def _probe_power(self) -> tuple[str | None, str | None]:
        """Return (scope, None) for the first power source that works, else (None, reason)."""
        nv = self._nvml
        scopes = (("GPU", "NVML_POWER_SCOPE_GPU", 0), ("MODULE", "NVML_POWER_SCOPE_MODULE", 1))
        failures: list[str] = []
        for label, constant, default in scopes:
            scope = getattr(nv, constant, default)
            try:
                self._read_field_power(scope)
            except (DeviceUnsupportedError, PermissionDeniedError) as exc:
                failures.append(f"scope {label}: {exc}")
                continue
            self._field_scope = scope
            return label, None
        instant_power_usage = self._arch_known() and (
            self._arch_code < ARCH_AMPERE or bool(_GA100_NAME.search(self._identity.name))
        )
        if instant_power_usage:
            try:
                with nvml_errors("read power usage"):
                    nv.nvmlDeviceGetPowerUsage(self._handle)
                return "power_usage", None
            except (DeviceUnsupportedError, PermissionDeniedError) as exc:
                failures.append(str(exc))
        else:
            failures.append("nvmlDeviceGetPowerUsage is a 1 s average on this GPU and is not used")
        return None, "power unavailable: field 186 (NVML_FI_DEV_POWER_INSTANT): " + "; ".join(
            failures
        )

    # reading ----------------------------------------------------------------------------------

    def _read_field_power(self, scope: int) -> PowerSample:
        nv = self._nvml
        with nvml_errors("read instant power (field 186)"):
            values = nv.nvmlDeviceGetFieldValues(self._handle, [(FIELD_POWER_INSTANT, scope)])
            value = values[0]
            if value.nvmlReturn != getattr(nv, "NVML_SUCCESS", 0):
                raise nv.NVMLError(value.nvmlReturn)
        member = _VALUE_MEMBERS.get(int(value.valueType), "uiVal")
        return PowerSample(int(value.timestamp), float(getattr(value.value, member)))

    def identity(self) -> DeviceIdentity:
        """Return name, UUID, architecture, driver and NVML versions, memory (read at open)."""
        return self._identity

    def torch_device(self) -> torch.device:
        """Return ``cuda:i`` for this GPU (matched to torch's numbering by UUID when possible)."""
        return torch.device("cuda", self._cuda_index())

    def _cuda_index(self) -> int:
        if self._torch_index is None:
            self._torch_index = self.index
            if torch.cuda.is_available():
                wanted = self._identity.device_id.removeprefix("GPU-").lower()
                for i in range(torch.cuda.device_count()):
                    uuid = str(getattr(torch.cuda.get_device_properties(i), "uuid", ""))
                    if uuid.removeprefix("GPU-").lower() == wanted:
                        self._torch_index = i
                        break
        return self._torch_index

    def synchronize(self) -> None:
        """Wait for all CUDA work on this GPU (no-op where torch has no CUDA)."""
        if torch.cuda.is_available():
            torch.cuda.synchronize(self.torch_device())

    @nvml_errors("read the energy counter")
    def energy_mj(self) -> int | None:
        """Return ``nvmlDeviceGetTotalEnergyConsumption`` in mJ, or None before Volta.

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors (e.g. GPU lost).
        """
        if self._energy_reason is not None:
            return None
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    def energy_unavailable_reason(self) -> str | None:
        """Say why the energy counter is not used (pre-Volta, not supported, not permitted)."""
        return self._energy_reason

    def power_mw(self) -> PowerSample | None:
        """Return instant power (mW) with NVML's timestamp (µs since the epoch).

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors.
        """
        if self._power_scope is None:
            return None
        if self._power_scope == "power_usage":
            with nvml_errors("read power usage"):
                milliwatts = self._nvml.nvmlDeviceGetPowerUsage(self._handle)
            return PowerSample(self._wall_clock_us(), float(milliwatts))
        return self._read_field_power(self._field_scope)

    def power_unavailable_reason(self) -> str | None:
        """Say why there is no instant power reading."""
        return self._power_reason

    def power_scope(self) -> str | None:
        """Return ``"GPU"``, ``"MODULE"`` (field 186 scopes), ``"power_usage"`` or None."""
        return self._power_scope

    def timestamp_us(self) -> int:
        """Return the wall clock in µs: NVML stamps field values with host time since the epoch."""
        return self._wall_clock_us()

    def _update_probe(self) -> Callable[[], object] | None:
        if self._energy_reason is None:
            return self.energy_mj
        if self._power_scope is not None:
            # The value, not the timestamp: NVML may stamp every read, updated or not.
            return lambda: sample.power_mw if (sample := self.power_mw()) else None
        return None

    def telemetry(self) -> Telemetry:
        """Return SM/memory clocks (MHz), temperature (°C), power limit (W), clock-event reasons.

        Raises:
            DeviceError: the GPU failed (GPU lost, ...); unsupported fields are None.
        """
        nv = self._nvml
        # nvidia-ml-py < 12.535 only has the older name.
        reasons_fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        sm = self._optional("read the SM clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
        mem = self._optional("read the memory clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
        temp = self._optional(
            "read the temperature", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU
        )
        limit = self._optional("read the power limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        reasons = self._optional("read the clock-event reasons", reasons_fn)
        return Telemetry(
            timestamp_us=self.timestamp_us(),
            sm_clock_mhz=None if sm is None else int(sm),
            mem_clock_mhz=None if mem is None else int(mem),
            temperature_c=None if temp is None else float(temp),
            power_limit_w=None if limit is None else int(limit) / 1000,
            clock_event_reasons=None if reasons is None else int(reasons),
        )

    def context_telemetry(self) -> dict[str, Any]:
        """Return utilization (%), memory (bytes) and GPU processes through nvitop; {} on failure.

        Meant for ~1 s context sampling, not for per-operator power (METHODOLOGY §1).
        """
        try:
            import nvitop

            if self._nvitop_device is None:
                self._nvitop_device = nvitop.Device(self.index)
            dev = self._nvitop_device
            processes = [
                {"pid": int(pid), "gpu_memory_bytes": _na(proc.gpu_memory())}
                for pid, proc in dev.processes().items()
            ]
            return {
                "gpu_utilization_pct": _na(dev.gpu_utilization()),
                "memory_utilization_pct": _na(dev.memory_utilization()),
                "memory_used_bytes": _na(dev.memory_used()),
                "memory_total_bytes": _na(dev.memory_total()),
                "temperature_c": _na(dev.temperature()),
                "processes": processes,
            }
        except Exception:  # noqa: BLE001 - context telemetry is optional; a failure loses only it
            return {}

    def provenance(self) -> dict[str, Any]:
        """Return the common provenance plus GPU index, compute capability and CUDA driver."""
        out = super().provenance()
        out["gpu_index"] = self.index
        out["cuda_driver_version"] = self._identity.extra.get("cuda_driver_version")
        return out

    def close(self) -> None:
        """Shut NVML down for this device (pynvml counts inits); calling it again does nothing."""
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(Exception):  # nothing useful to do if shutdown fails
                self._nvml.nvmlShutdown()
        super().close()


def _na(value: Any) -> Any:
    """Turn nvitop's ``NA`` (a str subclass) into None; keep numbers."""
    if isinstance(value, str):
        return None
    return value
