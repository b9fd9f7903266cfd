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
from operator_db.devices.cuda import cuda_uuid
from operator_db.devices.nvml import (
    gpu_gone,
    import_pynvml,
    nvml_code_error,
    nvml_error_code,
    nvml_errors,
)
from operator_db.devices.nvml_gpu import (
    ARCH_AMPERE,
    ARCH_UNKNOWN,
    ARCH_VOLTA,
    NvmlGpu,
    architecture_name,
)
from operator_db.errors import DeviceError, DeviceUnsupportedError, OperatorDBError

FIELD_POWER_INSTANT = 186
"""``NVML_FI_DEV_POWER_INSTANT``: instant power in mW, with its own timestamp."""

_POWER_SCOPES: dict[str, tuple[str, int]] = {
    "GPU": ("NVML_POWER_SCOPE_GPU", 0),
    "MODULE": ("NVML_POWER_SCOPE_MODULE", 1),
}
_READ_FIELD = "read instant power (field 186)"
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVML_ERROR_NOT_FOUND = 6

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
    """One NVIDIA GPU: torch's ``cuda:index``, read through NVML by its UUID.

    ``index`` is torch's (``cuda:N`` under ``CUDA_VISIBLE_DEVICES``): the device takes that GPU's
    UUID from torch and opens NVML by it, so energy and time come from the same GPU. NVML's own
    numbering (PCI order, all GPUs of the host) is never used to find it, except with
    ``nvml_only=True``: then ``index`` is NVML's, torch is not asked, and the device has no torch
    device (it reads energy, power and telemetry, but nothing can be measured on it; for
    simulated hosts in tests and NVML-only tools).

    Energy: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ, Volta+); it covers the whole module
    (CPU, GPU and memory) where C2C mode is on (Grace Hopper), else the GPU (``energy_scope()``).
    Power: field 186 in the counter's scope: GPU (else MODULE), or MODULE only with C2C mode on;
    ``nvmlDeviceGetPowerUsage`` only before Ampere and on GA100, where it is an instant reading
    (elsewhere it is a 1 s average and is not used). Power timestamps are NVML's host timestamps
    (µs since the epoch), so ``timestamp_us()`` reads the wall clock.
    """

    device_type: ClassVar[DeviceType] = "gpu"

    def __init__(
        self,
        index: int = 0,
        *,
        nvml: Any = None,
        nvml_only: bool = False,
        clock: Clock = time.perf_counter_ns,
        sleep: Sleep = time.sleep,
        wall_clock_us: Callable[[], int] = _wall_clock_us,
    ) -> None:
        """Open torch's ``cuda:index`` (NVML GPU ``index`` with ``nvml_only``).

        ``nvml`` replaces the ``pynvml`` module (tests).

        Raises:
            DeviceUnsupportedError: torch has no CUDA (a CPU-only build, ...; not asked with
                ``nvml_only``), or ``NVML unavailable: ...`` (not installed, no driver, ...).
            DeviceError: no ``cuda:index``; no NVML GPU with its UUID; the GPU failed while
                being opened.
        """
        super().__init__(clock=clock, sleep=sleep)
        self.index = index
        self.nvml_only = nvml_only
        self._cuda_uuid = None if nvml_only else cuda_uuid(index)
        self._wall_clock_us = wall_clock_us
        self._nvml: Any = nvml if nvml is not None else import_pynvml()
        self._initialised = False
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
        if self._cuda_uuid is None:
            with nvml_errors("count GPUs"):
                count = int(nv.nvmlDeviceGetCount())
            if not 0 <= self.index < count:
                raise DeviceError(f"no NVIDIA GPU at NVML index {self.index} ({count} found)")
            with nvml_errors(f"open GPU {self.index}"):
                handle = nv.nvmlDeviceGetHandleByIndex(self.index)
        else:
            handle = self._open_by_uuid(self._cuda_uuid)
        self._gpu = gpu = NvmlGpu(nv, handle)
        self._handle = handle
        self._arch_code = gpu.architecture()
        self._c2c = gpu.c2c_mode()
        nvml_index = self.index if self.nvml_only else None
        if nvml_index is None:
            nvml_index = gpu.optional("read the NVML index", nv.nvmlDeviceGetIndex)
        self._identity = gpu.identity(
            self._arch_code,
            {
                "cuda_index": None if self.nvml_only else self.index,
                "nvml_index": nvml_index,
                "c2c_mode": self._c2c,
            },
        )
        if self._cuda_uuid is not None and not _same_uuid(
            self._identity.device_id, self._cuda_uuid
        ):
            raise DeviceError(
                f"NVML opened {self._identity.device_id} for torch's cuda:{self.index} "
                f"({self._cuda_uuid}); refusing to read another GPU"
            )
        self._energy_reason = self._probe_energy()
        self._power_scope, self._power_reason = self._probe_power()

    def _open_by_uuid(self, uuid: str) -> Any:
        try:
            with nvml_errors(f"open the GPU of cuda:{self.index} by its UUID"):
                return self._nvml.nvmlDeviceGetHandleByUUID(uuid)
        except DeviceError as exc:
            if nvml_error_code(exc) not in (_NVML_ERROR_INVALID_ARGUMENT, _NVML_ERROR_NOT_FOUND):
                raise
            raise DeviceError(
                f"no NVML GPU matches torch's cuda:{self.index} (UUID {uuid}); "
                "energy is never read from another GPU"
            ) from exc

    def _arch_known(self) -> bool:
        return self._arch_code is not None and self._arch_code != ARCH_UNKNOWN

    def _probe_energy(self) -> str | None:
        """Return why the energy counter cannot be used, or None when it can.

        Raises:
            DeviceError: the GPU is gone (``NVML_GPU_GONE``); other failures are a reason.
        """
        if self._arch_known() and self._arch_code is not None and self._arch_code < ARCH_VOLTA:
            return (
                "energy unavailable: the NVML energy counter needs Volta or newer; "
                f"this GPU is {architecture_name(self._arch_code)} "
                "(power integration is used instead)"
            )
        try:
            with nvml_errors("read the energy counter"):
                self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except OperatorDBError as exc:
            if gpu_gone(exc):
                raise
            return f"energy unavailable: {exc}"
        return None

    def _probe_power(self) -> tuple[str | None, str | None]:
        """Return (scope, None) for the first power source that works, else (None, reason).

        A source that fails (as a whole call or in its field's own return code) is dropped, with
        why in the reason; only a failure saying the GPU is gone fails the open.
        """
        nv = self._nvml
        failures: list[str] = []
        labels: tuple[str, ...] = ("GPU", "MODULE")
        if self._c2c:
            labels = ("MODULE",)
            failures.append(
                "scope GPU: not used: C2C mode is on, so the energy counter covers the whole "
                "module (CPU, GPU and memory)"
            )
        for label in labels:
            constant, default = _POWER_SCOPES[label]
            scope = getattr(nv, constant, default)
            problem = self._field_problem(scope)
            if problem is None:
                self._field_scope = scope
                return label, None
            failures.append(f"scope {label}: {problem}")
        instant_power_usage = (
            self._arch_known()
            and self._arch_code is not None
            and (self._arch_code < ARCH_AMPERE or bool(_GA100_NAME.search(self._identity.name)))
        )
        if instant_power_usage:
            try:
                with nvml_errors("read power usage"):
                    nv.nvmlDeviceGetPowerUsage(self._handle)
                return "power_usage", None
            except OperatorDBError as exc:
                if gpu_gone(exc):
                    raise
                failures.append(str(exc))
        else:
            failures.append("nvmlDeviceGetPowerUsage is a 1 s average on this GPU and is not used")
        return None, "power unavailable: field 186 (NVML_FI_DEV_POWER_INSTANT): " + "; ".join(
            failures
        )

    def _field_problem(self, scope: int) -> str | None:
        """Read field 186 with ``scope`` once; return why it cannot be used, or None.

        Raises:
            DeviceError: the GPU is gone.
        """
        try:
            value = self._field_value(scope)
        except OperatorDBError as exc:
            if gpu_gone(exc):
                raise
            return str(exc)
        if value.nvmlReturn != getattr(self._nvml, "NVML_SUCCESS", 0):
            return str(nvml_code_error(int(value.nvmlReturn), _READ_FIELD))
        return None

    # reading ----------------------------------------------------------------------------------

    def _field_value(self, scope: int) -> Any:
        with nvml_errors(_READ_FIELD):
            values = self._nvml.nvmlDeviceGetFieldValues(
                self._handle, [(FIELD_POWER_INSTANT, scope)]
            )
        return values[0]

    def _read_field_power(self, scope: int) -> PowerSample:
        value = self._field_value(scope)
        if value.nvmlReturn != getattr(self._nvml, "NVML_SUCCESS", 0):
            raise nvml_code_error(int(value.nvmlReturn), _READ_FIELD)
        member = _VALUE_MEMBERS.get(int(value.valueType), "uiVal")
        return PowerSample(int(value.timestamp), float(getattr(value.value, member)))

    @property
    def nvml_gpu(self) -> NvmlGpu:
        """The GPU's NVML handle with its other readings (power limits, clock restrictions)."""
        return self._gpu

    def identity(self) -> DeviceIdentity:
        """Return name, UUID, architecture, driver and NVML versions, memory (read at open)."""
        return self._identity

    def torch_device(self) -> torch.device:
        """Return torch's ``cuda:index`` and make it the current device (``activate()``).

        Measuring code asks for the torch device before it allocates or times anything, so CUDA
        events, streams and graphs land on this GPU.

        Raises:
            DeviceUnsupportedError: the device was opened with ``nvml_only`` and has none.
        """
        self.activate()
        return torch.device("cuda", self.index)

    def activate(self) -> None:
        """Call ``torch.cuda.set_device(index)``: this GPU becomes the current one.

        CUDA's current device is per thread: this sets it for the calling thread, which is why
        ``torch_device()`` calls it each time measuring code asks for the device.

        Raises:
            DeviceUnsupportedError: the device was opened with ``nvml_only`` (no torch device).
        """
        if self.nvml_only:
            raise DeviceUnsupportedError(
                f"NVIDIA GPU {self.index} was opened by NVML index only (nvml_only): "
                "it has no torch device, so nothing can be measured on it"
            )
        torch.cuda.set_device(self.index)

    def synchronize(self) -> None:
        """Wait for all CUDA work on this GPU (nothing to wait for with ``nvml_only``)."""
        if not self.nvml_only:
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

    def energy_scope(self) -> str | None:
        """Return what the counter covers: ``"MODULE"`` with C2C mode on, else ``"GPU"``.

        On Grace Hopper (C2C mode on) the counter covers CPU, GPU and memory. None without a
        counter.
        """
        if self._energy_reason is not None:
            return None
        return "MODULE" if self._c2c else "GPU"

    def c2c_mode(self) -> bool | None:
        """Return whether C2C mode is on (Grace Hopper); None where NVML cannot say."""
        return self._c2c

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

    def _power_probe(self) -> Callable[[], object] | None:
        if self._power_scope is None:
            return None
        # The value, not the timestamp: NVML may stamp every read, updated or not.
        return lambda: sample.power_mw if (sample := self.power_mw()) else None

    def _update_probe(self) -> Callable[[], object] | None:
        if self._energy_reason is None:
            return self.energy_mj
        return self._power_probe()

    def telemetry(self) -> Telemetry:
        """Return SM/memory clocks (MHz), temperature (°C), power limit (W), clock-event reasons.

        The temperature comes from ``nvmlDeviceGetTemperatureV`` where the binding and driver
        have it (else the deprecated ``nvmlDeviceGetTemperature``); the reasons from
        ``nvmlDeviceGetCurrentClocksEventReasons``, else ``...ClocksThrottleReasons``.

        Raises:
            DeviceError: the GPU failed (GPU lost, ...); unsupported fields are None.
        """
        return self._gpu.telemetry(self.timestamp_us())

    def violation_counters_us(self) -> dict[str, int]:
        """Return ``nvmlDeviceGetViolationStatus`` counters per policy, in µs; {} where none.

        ``<policy>_violation_us``: cumulative time the clocks were held below target by the
        policy (``power``, ``thermal``, ... see ``VIOLATION_POLICIES``); ``<policy>_reference_us``:
        NVML's CPU timestamp of that reading. Unsupported policies are left out.

        Raises:
            DeviceError: the GPU failed (GPU lost, ...).
        """
        return self._gpu.violation_counters_us()

    def context_telemetry(self) -> dict[str, Any]:
        """Return utilization (%), memory (bytes) and GPU processes through nvitop; {} on failure.

        Meant for ~1 s context sampling, not for per-operator power (METHODOLOGY §1).
        """
        try:
            import nvitop

            if self._nvitop_device is None:  # by UUID: nvitop's index is NVML's, not torch's
                self._nvitop_device = nvitop.Device(uuid=self._identity.device_id)
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
        """Return the common provenance plus the CUDA and NVML indices, C2C mode, CUDA driver."""
        out = super().provenance()
        extra = self._identity.extra
        out["cuda_index"] = extra.get("cuda_index")
        out["nvml_index"] = extra.get("nvml_index")
        out["c2c_mode"] = self._c2c
        out["cuda_driver_version"] = extra.get("cuda_driver_version")
        return out

    def close(self) -> None:
        """Shut NVML down for this device (pynvml counts inits); calling it again does nothing."""
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(Exception):  # nothing useful to do if shutdown fails
                self._nvml.nvmlShutdown()
        super().close()


def _same_uuid(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()


def _na(value: Any) -> Any:
    """Turn nvitop's ``NA`` (a str subclass) into None; keep numbers."""
    if isinstance(value, str):
        return None
    return value
