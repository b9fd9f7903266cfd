"""One GPU's NVML handle and what is read through it besides energy and power.

Identity, telemetry (clocks, temperature, power limit, clock-event reasons), C2C mode and the
clock-limit violation counters. Every call goes through ``nvml_errors``; a getter the binding
lacks or the driver does not support gives None (or is left out), a lost GPU raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operator_db.devices.base import DeviceIdentity, Telemetry
from operator_db.devices.nvml import as_text, gpu_gone, nvml_errors
from operator_db.errors import DeviceUnsupportedError, OperatorDBError, PermissionDeniedError

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

VIOLATION_POLICIES: tuple[tuple[str, str, int], ...] = (
    ("power", "NVML_PERF_POLICY_POWER", 0),
    ("thermal", "NVML_PERF_POLICY_THERMAL", 1),
    ("sync_boost", "NVML_PERF_POLICY_SYNC_BOOST", 2),
    ("board_limit", "NVML_PERF_POLICY_BOARD_LIMIT", 3),
    ("low_utilization", "NVML_PERF_POLICY_LOW_UTILIZATION", 4),
    ("reliability", "NVML_PERF_POLICY_RELIABILITY", 5),
    ("total_app_clocks", "NVML_PERF_POLICY_TOTAL_APP_CLOCKS", 10),
    ("total_base_clocks", "NVML_PERF_POLICY_TOTAL_BASE_CLOCKS", 11),
)
"""``nvmlPerfPolicyType_t`` values read by ``violation_counters_us()``: (key, constant, code)."""


def architecture_name(code: int | None) -> str | None:
    """Name an ``nvmlDeviceGetArchitecture`` code; None when unknown."""
    if code is None or code == ARCH_UNKNOWN:
        return None
    return ARCHITECTURES.get(code, f"architecture {code}")


class NvmlGpu:
    """An NVML device handle and the module it came from (``pynvml`` or a stand-in)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self._violation_unsupported: set[str] = set()

    def optional(self, action: str, function: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML getter on this GPU; None where the GPU or driver does not support it.

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors (GPU lost, ...).
        """
        try:
            with nvml_errors(action):
                return function(self.handle, *args)
        except DeviceUnsupportedError:
            return None

    def first_supported(self, action: str, names: tuple[str, ...], *args: Any) -> Any:
        """Call the first of ``names`` that the binding has and the driver supports; else None.

        A function missing from the binding, or one the driver answers with NOT_SUPPORTED,
        FUNCTION_NOT_FOUND (and the like), hands over to the next name.

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors (GPU lost, ...).
        """
        for name in names:
            function = getattr(self.nvml, name, None)
            if function is None:
                continue
            try:
                with nvml_errors(action):
                    return function(self.handle, *args)
            except DeviceUnsupportedError:
                continue
        return None

    def optional_system(self, action: str, function_name: str) -> str | None:
        """Call a system-wide NVML getter; its text, or None where missing or unsupported."""
        function = getattr(self.nvml, function_name, None)
        if function is None:
            return None
        try:
            with nvml_errors(action):
                return as_text(function())
        except DeviceUnsupportedError:
            return None

    def architecture(self) -> int | None:
        """Return the ``nvmlDeviceGetArchitecture`` code, or None where unsupported."""
        code = self.optional("read the architecture", self.nvml.nvmlDeviceGetArchitecture)
        return None if code is None else int(code)

    def c2c_mode(self) -> bool | None:
        """Return whether C2C mode is on (Grace Hopper); None where binding or driver can't say.

        Raises:
            DeviceError: the GPU is gone (any other failure means "cannot say").
        """
        function = getattr(self.nvml, "nvmlDeviceGetC2cModeInfoV", None)
        if function is None:
            return None
        try:
            with nvml_errors("read the C2C mode"):
                info = function(self.handle)
        except OperatorDBError as exc:
            if gpu_gone(exc):
                raise
            return None
        return bool(info.isC2cEnabled)

    def identity(self, arch_code: int | None, extra: dict[str, Any]) -> DeviceIdentity:
        """Read name, UUID, memory, compute capability, PCI bus id, driver/NVML/CUDA versions.

        ``extra`` is added to the identity's ``extra`` (e.g. the CUDA and NVML indices).

        Raises:
            DeviceError: the name or UUID could not be read.
        """
        nv = self.nvml
        with nvml_errors("read the GPU name"):
            name = as_text(nv.nvmlDeviceGetName(self.handle))
        with nvml_errors("read the GPU UUID"):
            uuid = as_text(nv.nvmlDeviceGetUUID(self.handle))
        memory = self.optional("read the memory size", nv.nvmlDeviceGetMemoryInfo)
        capability = self.optional(
            "read the compute capability", nv.nvmlDeviceGetCudaComputeCapability
        )
        pci = self.optional("read the PCI bus id", nv.nvmlDeviceGetPciInfo)
        cuda_driver = None
        get_cuda = getattr(nv, "nvmlSystemGetCudaDriverVersion", None)
        if get_cuda is not None:
            try:
                with nvml_errors("read the CUDA driver version"):
                    version = int(get_cuda())
                cuda_driver = f"{version // 1000}.{version % 1000 // 10}"
            except DeviceUnsupportedError:
                pass
        return DeviceIdentity(
            device_type="gpu",
            name=name,
            vendor="NVIDIA",
            device_id=uuid,
            architecture=architecture_name(arch_code),
            driver_version=self.optional_system(
                "read the driver version", "nvmlSystemGetDriverVersion"
            ),
            nvml_version=self.optional_system("read the NVML version", "nvmlSystemGetNVMLVersion"),
            memory_bytes=int(memory.total) if memory is not None else None,
            extra={
                **extra,
                "architecture_code": arch_code,
                "compute_capability": ".".join(str(v) for v in capability) if capability else None,
                "pci_bus_id": as_text(pci.busId) if pci is not None else None,
                "cuda_driver_version": cuda_driver,
            },
        )

    def telemetry(self, timestamp_us: int) -> Telemetry:
        """Return SM/memory clocks (MHz), temperature (°C), power limit (W), clock-event reasons.

        Raises:
            DeviceError: the GPU failed (GPU lost, ...); unsupported fields are None.
        """
        nv = self.nvml
        sm = self.optional("read the SM clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
        mem = self.optional("read the memory clock", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
        # nvmlDeviceGetTemperature is deprecated; older bindings and drivers lack the V form.
        temp = self.first_supported(
            "read the temperature",
            ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
            nv.NVML_TEMPERATURE_GPU,
        )
        limit = self.optional("read the power limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        # nvidia-ml-py < 12.535, and older drivers, only have the throttle-reasons name.
        reasons = self.first_supported(
            "read the clock-event reasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        )
        return Telemetry(
            timestamp_us=timestamp_us,
            sm_clock_mhz=None if sm is None else int(sm),
            mem_clock_mhz=None if mem is None else int(mem),
            temperature_c=None if temp is None else float(temp),
            power_limit_w=None if limit is None else int(limit) / 1000,
            clock_event_reasons=None if reasons is None else int(reasons),
        )

    def power_limits_w(self) -> dict[str, float | None]:
        """Return the enforced and the default power limit, in W; None where unsupported.

        ``enforced_w`` is ``nvmlDeviceGetEnforcedPowerLimit``; ``default_w`` is
        ``nvmlDeviceGetPowerManagementDefaultLimit``, the limit the board ships with. An enforced
        limit below the default means someone capped the GPU.

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors (GPU lost, ...).
        """
        nv = self.nvml
        enforced = self.optional("read the power limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        default = self.first_supported(
            "read the default power limit", ("nvmlDeviceGetPowerManagementDefaultLimit",)
        )
        return {
            "enforced_w": None if enforced is None else int(enforced) / 1000,
            "default_w": None if default is None else int(default) / 1000,
        }

    def application_clocks_restricted(self) -> bool | None:
        """Return whether setting application clocks is root-only; None where NVML cannot say.

        Reads ``nvmlDeviceGetAPIRestriction(h, NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS)``, which
        changes nothing. (Locked clocks, ``nvmlDeviceSetGpuLockedClocks``, always need root.)

        Raises:
            PermissionDeniedError, DeviceError: translated NVML errors (GPU lost, ...).
        """
        function = getattr(self.nvml, "nvmlDeviceGetAPIRestriction", None)
        if function is None:
            return None
        api = getattr(self.nvml, "NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS", 0)
        state = self.optional("read the application-clock restriction", function, api)
        if state is None:
            return None
        return int(state) == int(getattr(self.nvml, "NVML_FEATURE_ENABLED", 1))

    def violation_counters_us(self) -> dict[str, int]:
        """Return ``nvmlDeviceGetViolationStatus`` per policy: violation time and its timestamp, µs.

        ``<policy>_violation_us``: cumulative time the clocks were held below target by the
        policy (NVML counts ns; floored to µs); ``<policy>_reference_us``: NVML's CPU timestamp of
        the reading (µs). Policies: ``VIOLATION_POLICIES``; unsupported ones are left out (and not
        asked again), so the result is {} where none is supported.

        Raises:
            DeviceError: the GPU failed (GPU lost, ...).
        """
        function = getattr(self.nvml, "nvmlDeviceGetViolationStatus", None)
        if function is None:
            return {}
        out: dict[str, int] = {}
        for name, constant, default in VIOLATION_POLICIES:
            if name in self._violation_unsupported:
                continue
            try:
                with nvml_errors(f"read the {name} violation time"):
                    status = function(self.handle, getattr(self.nvml, constant, default))
            except (DeviceUnsupportedError, PermissionDeniedError):
                self._violation_unsupported.add(name)
                continue
            out[f"{name}_violation_us"] = int(status.violationTime) // 1000
            out[f"{name}_reference_us"] = int(status.referenceTime)
        return out
