"""The NVIDIA adapter against a simulated NVML (stand-in pynvml with autospecced functions)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pynvml as real
import pytest
import torch

from operator_db.devices import EnergyWindow, NvidiaDevice, nvml_available
from operator_db.devices.nvml import (
    NVML_ERROR_TABLE,
    import_pynvml,
    nvml_errors,
    translate_nvml_error,
)
from operator_db.errors import (
    DeviceError,
    DeviceUnsupportedError,
    OperatorDBError,
    PermissionDeniedError,
)
from tests.devices.clock import ManualClock
from tests.devices.nvml_sim import GIB, SimCuda, SimGpu, SimHost, make_nvml

# torch.cuda is simulated on the simulated host (every GPU visible) unless a test says otherwise.
pytestmark = pytest.mark.usefixtures("cuda")

GPU_SCOPE = real.NVML_POWER_SCOPE_GPU
MODULE_SCOPE = real.NVML_POWER_SCOPE_MODULE
LIB_MISSING_REASON = (
    "NVML unavailable: NVML could not initialise: the NVML library (libnvidia-ml.so.1) was not "
    "found; is the NVIDIA driver installed? (NVML_ERROR_LIBRARY_NOT_FOUND)"
)


def field_calls(nvml: Any) -> list[list[tuple[int, int]]]:
    return [call.args[1] for call in nvml.nvmlDeviceGetFieldValues.call_args_list]


# --- errors --------------------------------------------------------------------------------------


def test_error_table_codes_are_pynvml_constants() -> None:
    for code, (name, _, _) in NVML_ERROR_TABLE.items():
        assert getattr(real, name) == code


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (real.NVML_ERROR_NOT_SUPPORTED, DeviceUnsupportedError),
        (real.NVML_ERROR_FUNCTION_NOT_FOUND, DeviceUnsupportedError),
        (real.NVML_ERROR_NO_PERMISSION, PermissionDeniedError),
        (real.NVML_ERROR_GPU_IS_LOST, DeviceError),
        (real.NVML_ERROR_UNINITIALIZED, DeviceError),
        (real.NVML_ERROR_LIBRARY_NOT_FOUND, DeviceUnsupportedError),
        (real.NVML_ERROR_DRIVER_NOT_LOADED, DeviceUnsupportedError),
        (real.NVML_ERROR_TIMEOUT, DeviceError),
    ],
)
def test_translate_maps_codes_to_project_errors(code: int, expected: type[Exception]) -> None:
    error = translate_nvml_error(real.NVMLError(code), "read the energy counter")
    assert type(error) is expected
    name = NVML_ERROR_TABLE[code][0]
    assert str(error).startswith("NVML could not read the energy counter: ")
    assert str(error).endswith(f"({name})")
    assert "\n" not in str(error)


def test_translate_unknown_code_is_a_device_error() -> None:
    error = translate_nvml_error(real.NVMLError(12345), "count GPUs")
    assert type(error) is DeviceError
    assert str(error).startswith("NVML could not count GPUs: ")
    assert str(error).endswith("(NVML error 12345)")


def test_nvml_errors_works_as_decorator_and_leaves_other_errors_alone() -> None:
    @nvml_errors("do it")
    def lost() -> None:
        raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)

    with pytest.raises(DeviceError, match=r"NVML could not do it: the GPU is lost") as info:
        lost()
    assert isinstance(info.value.__cause__, real.NVMLError)
    with pytest.raises(KeyError), nvml_errors("do it"):
        raise KeyError("not NVML")


# --- availability --------------------------------------------------------------------------------


def test_nvml_available_reports_gpus_and_shuts_down(nvml: Any) -> None:
    assert nvml_available(nvml) == (True, "1 NVIDIA GPU(s), driver 550.54.15")
    assert nvml.nvmlInit.call_count == 1
    assert nvml.nvmlShutdown.call_count == 1


def test_nvml_available_library_missing(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_LIBRARY_NOT_FOUND
    assert nvml_available(nvml) == (False, LIB_MISSING_REASON)


def test_nvml_available_driver_not_loaded(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_DRIVER_NOT_LOADED
    assert nvml_available(nvml) == (
        False,
        "NVML unavailable: NVML could not initialise: the NVIDIA driver is not loaded "
        "(NVML_ERROR_DRIVER_NOT_LOADED)",
    )


def test_nvml_available_without_gpus(nvml: Any) -> None:
    nvml.nvmlDeviceGetCount.side_effect = lambda: 0
    assert nvml_available(nvml) == (False, "NVML unavailable: NVML works but sees no NVIDIA GPU")
    assert nvml.nvmlShutdown.call_count == 1


def test_nvml_available_when_nvidia_ml_py_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes ``import pynvml`` fail
    reason = "NVML unavailable: nvidia-ml-py is not installed (pip install 'operator-db[gpu]')"
    assert nvml_available() == (False, reason)
    with pytest.raises(DeviceUnsupportedError) as info:
        import_pynvml()
    assert str(info.value) == reason
    with pytest.raises(DeviceUnsupportedError) as info:
        NvidiaDevice(0)
    assert str(info.value) == reason


def test_open_with_library_missing_raises_a_clear_reason(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(DeviceUnsupportedError) as info:
        NvidiaDevice(0, nvml=nvml)
    assert str(info.value) == LIB_MISSING_REASON


def test_open_bad_cuda_index_is_refused_before_nvml(nvml: Any) -> None:
    with pytest.raises(DeviceError) as info:
        NvidiaDevice(3, nvml=nvml)
    assert str(info.value) == "no CUDA device cuda:3 (torch sees 1 GPU(s))"
    assert nvml.nvmlInit.call_count == 0


def test_open_bad_nvml_index_closes_nvml(nvml: Any) -> None:
    with pytest.raises(DeviceError) as info:
        NvidiaDevice(3, nvml=nvml, nvml_only=True)
    assert str(info.value) == "no NVIDIA GPU at NVML index 3 (1 found)"
    assert nvml.nvmlShutdown.call_count == 1


def test_open_gpu_lost_propagates_and_closes(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlDeviceGetUUID"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceError) as info:
        NvidiaDevice(0, nvml=nvml)
    assert not isinstance(info.value, DeviceUnsupportedError)
    assert "GPU is lost" in str(info.value)
    assert nvml.nvmlShutdown.call_count == 1


# --- identity ------------------------------------------------------------------------------------


def test_identity(nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        ident = gpu.identity()
        assert gpu.kind_name() == "NVIDIA H100 80GB HBM3"
        assert ident.device_type == "gpu"
        assert ident.vendor == "NVIDIA"
        assert ident.device_id == "GPU-01234567-89ab-cdef-0123-456789abcdef"
        assert ident.architecture == "Hopper"
        assert ident.driver_version == "550.54.15"
        assert ident.nvml_version == "12.550.54.15"
        assert ident.memory_bytes == 80 * GIB
        assert ident.extra == {
            "cuda_index": 0,
            "nvml_index": 0,
            "c2c_mode": None,
            "architecture_code": real.NVML_DEVICE_ARCH_HOPPER,
            "compute_capability": "9.0",
            "pci_bus_id": "00000000:18:00.0",
            "cuda_driver_version": "12.4",
        }
    assert gpu.closed
    assert nvml.nvmlShutdown.call_count == 1


def test_identity_accepts_bytes_and_missing_optional_fields(host: SimHost, nvml: Any) -> None:
    nvml.nvmlDeviceGetName.side_effect = lambda handle: b"Tesla V100-SXM2-16GB"
    host.fail["nvmlDeviceGetArchitecture"] = real.NVML_ERROR_NOT_SUPPORTED
    host.fail["nvmlDeviceGetMemoryInfo"] = real.NVML_ERROR_NOT_SUPPORTED
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.kind_name() == "Tesla V100-SXM2-16GB"
        assert gpu.identity().architecture is None
        assert gpu.identity().memory_bytes is None
        # Unknown architecture: the counter is tried, and works.
        assert gpu.energy_mj() == 5_000_000


def test_close_is_idempotent(nvml: Any) -> None:
    gpu = NvidiaDevice(0, nvml=nvml)
    gpu.close()
    gpu.close()
    assert nvml.nvmlShutdown.call_count == 1


def test_torch_device_makes_the_gpu_current(nvml: Any, cuda: SimCuda) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert cuda.set_device_calls == []  # opening alone changes nothing
        assert gpu.torch_device() == torch.device("cuda", 0)
        assert cuda.set_device_calls == [0]
        gpu.synchronize()
        assert cuda.synchronized == [torch.device("cuda", 0)]
        gpu.activate()
        assert cuda.set_device_calls == [0, 0, 0]


# --- energy counter ------------------------------------------------------------------------------


def test_energy_counter_reads(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.energy_unavailable_reason() is None
        start = gpu.energy_mj()
        host.gpus[0].energy_mj += 1_234
        assert gpu.energy_mj() == 5_001_234
        assert start == 5_000_000


def test_energy_no_permission_raises_permission_denied(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NO_PERMISSION
        with pytest.raises(PermissionDeniedError) as info:
            gpu.energy_mj()
    assert str(info.value) == (
        "NVML could not read the energy counter: insufficient permissions "
        "(NVML_ERROR_NO_PERMISSION)"
    )


def test_energy_no_permission_at_open_is_a_reason(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NO_PERMISSION
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.energy_mj() is None
        assert gpu.energy_unavailable_reason() == (
            "energy unavailable: NVML could not read the energy counter: insufficient "
            "permissions (NVML_ERROR_NO_PERMISSION)"
        )


def test_gpu_lost_while_reading(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        for name in (
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetFieldValues",
            "nvmlDeviceGetClockInfo",
        ):
            host.fail[name] = real.NVML_ERROR_GPU_IS_LOST
        for read in (gpu.energy_mj, gpu.power_mw, gpu.telemetry):
            with pytest.raises(DeviceError, match="GPU is lost") as info:
                read()
            assert not isinstance(info.value, DeviceUnsupportedError)


def test_counter_not_supported_falls_back_to_power_integration(
    host: SimHost, nvml: Any, clock: ManualClock
) -> None:
    host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NOT_SUPPORTED
    gpu0 = host.gpus[0]
    wall = ManualClock(gpu0.power_timestamp_us * 1000)
    with NvidiaDevice(0, nvml=nvml, wall_clock_us=lambda: wall() // 1000) as gpu:
        assert gpu.energy_mj() is None
        assert gpu.energy_unavailable_reason() == (
            "energy unavailable: NVML could not read the energy counter: not supported by this "
            "GPU or driver (NVML_ERROR_NOT_SUPPORTED)"
        )
        with EnergyWindow(gpu, interval_s=0.005) as window:
            wall.advance_s(5.0)
    result = window.result
    assert result is not None
    assert result.counter_mj is None
    assert result.source == "power_integration"
    assert result.integrated_mj == 1_250_000.0  # 250 W held over 5 s
    assert result.disagreement is None


# --- pre-Volta -----------------------------------------------------------------------------------


def test_pre_volta_uses_power_usage_and_integration(host: SimHost, nvml: Any) -> None:
    host.gpus[0] = SimGpu(
        name="Tesla P100-PCIE-16GB", arch=real.NVML_DEVICE_ARCH_PASCAL, field_scopes=set()
    )
    wall = ManualClock(1_000_000_000_000)
    with NvidiaDevice(0, nvml=nvml, wall_clock_us=lambda: wall() // 1000) as gpu:
        assert gpu.energy_mj() is None
        assert gpu.energy_unavailable_reason() == (
            "energy unavailable: the NVML energy counter needs Volta or newer; this GPU is "
            "Pascal (power integration is used instead)"
        )
        assert nvml.nvmlDeviceGetTotalEnergyConsumption.call_count == 0
        assert gpu.power_scope() == "power_usage"
        assert gpu.power_mw() == (1_000_000_000, 240_000.0)
        with EnergyWindow(gpu, interval_s=0.005) as window:
            wall.advance_s(2.0)
    assert field_calls(nvml) == [[(186, GPU_SCOPE)], [(186, MODULE_SCOPE)]]
    result = window.result
    assert result is not None
    assert result.source == "power_integration"
    # 240 W: samples lie at the window's start and (the last one, taken at stop) its end.
    assert result.integrated_mj == 480_000.0


# --- instant power (field 186) -------------------------------------------------------------------


def test_power_field_186_scope_gpu(nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() == "GPU"
        assert gpu.power_unavailable_reason() is None
        sample = gpu.power_mw()
    assert sample == (1_700_000_000_000_000, 250_000.0)
    assert field_calls(nvml) == [[(186, GPU_SCOPE)], [(186, GPU_SCOPE)]]
    assert nvml.nvmlDeviceGetPowerUsage.call_count == 0


def test_power_field_186_falls_back_to_scope_module(host: SimHost, nvml: Any) -> None:
    host.gpus[0].field_scopes = {MODULE_SCOPE}  # Grace Hopper
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() == "MODULE"
        assert gpu.power_mw() == (1_700_000_000_000_000, 250_000.0)
        assert gpu.provenance()["power_field_scope"] == "MODULE"
    assert field_calls(nvml) == [[(186, GPU_SCOPE)], [(186, MODULE_SCOPE)], [(186, MODULE_SCOPE)]]
    assert nvml.nvmlDeviceGetPowerUsage.call_count == 0


def test_field_call_failing_as_a_whole_also_falls_back(host: SimHost, nvml: Any) -> None:
    calls: list[Any] = []

    def field_values(handle: Any, ids: list[Any]) -> Any:
        calls.append(ids)
        if ids[0][1] == GPU_SCOPE:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        host.gpus[0].field_scopes = {MODULE_SCOPE}
        from tests.devices.nvml_sim import _field_values

        return _field_values(host.gpus[0], ids)

    nvml.nvmlDeviceGetFieldValues.side_effect = field_values
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() == "MODULE"


def test_no_instant_power_on_ampere_does_not_use_power_usage(host: SimHost, nvml: Any) -> None:
    host.gpus[0] = SimGpu(name="NVIDIA A10", arch=real.NVML_DEVICE_ARCH_AMPERE, field_scopes=set())
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_mw() is None
        assert gpu.power_scope() is None
        reason = gpu.power_unavailable_reason()
    assert reason is not None
    assert reason.startswith("power unavailable: field 186 (NVML_FI_DEV_POWER_INSTANT): ")
    assert reason.endswith("nvmlDeviceGetPowerUsage is a 1 s average on this GPU and is not used")
    assert nvml.nvmlDeviceGetPowerUsage.call_count == 0


def test_ga100_may_use_power_usage(host: SimHost, nvml: Any) -> None:
    host.gpus[0] = SimGpu(
        name="NVIDIA A100-SXM4-80GB", arch=real.NVML_DEVICE_ARCH_AMPERE, field_scopes=set()
    )
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() == "power_usage"
        sample = gpu.power_mw()
    assert sample is not None
    assert sample.power_mw == 240_000.0


# --- update period -------------------------------------------------------------------------------


def test_counter_update_period_measured_with_injected_clock(
    host: SimHost, nvml: Any, clock: ManualClock
) -> None:
    # The counter moves every 25 ms of (manual) time.
    host.gpus[0].energy_fn = lambda: clock() // 25_000_000 * 7_000
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        assert gpu.known_update_period_s() is None
        assert gpu.counter_update_period_s() == 0.025
        sleeps = clock.sleeps
        assert gpu.counter_update_period_s() == 0.025  # measured once
        assert clock.sleeps == sleeps
        assert gpu.provenance()["counter_update_period_s"] == 0.025
    # First change after 50 polls of 0.5 ms, then 5 gaps of 50 polls.
    assert sleeps == 300


def test_counter_update_period_times_out(nvml: Any, clock: ManualClock) -> None:
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        with pytest.raises(DeviceError, match="did not change twice within 3 s"):
            gpu.counter_update_period_s()
        assert gpu.known_update_period_s() is None


def test_update_period_without_counter_uses_power_values(
    host: SimHost, nvml: Any, clock: ManualClock
) -> None:
    host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NOT_SUPPORTED
    gpu0 = host.gpus[0]

    def field_values(handle: Any, ids: list[Any]) -> Any:
        from tests.devices.nvml_sim import _field_values

        gpu0.power_mw = 200_000 + clock() // 40_000_000  # a new value every 40 ms
        return _field_values(gpu0, ids)

    nvml.nvmlDeviceGetFieldValues.side_effect = field_values
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        assert gpu.counter_update_period_s() == 0.04


# --- telemetry -----------------------------------------------------------------------------------


def test_telemetry_and_throttle_decoding(host: SimHost, nvml: Any) -> None:
    host.gpus[0].clock_event_reasons = 0x4 | 0x40
    wall = ManualClock(1_000_000_000)
    with NvidiaDevice(0, nvml=nvml, wall_clock_us=lambda: wall() // 1000) as gpu:
        t = gpu.telemetry()
    assert t.timestamp_us == 1_000_000
    assert (t.sm_clock_mhz, t.mem_clock_mhz) == (1980, 2619)
    assert t.temperature_c == 41.0
    assert t.power_limit_w == 700.0
    assert t.clock_event_reasons == 0x44
    assert t.clock_event_flags == ("sw_power_cap", "hw_thermal_slowdown")
    assert t.throttled is True
    assert t.power_capped is True


def test_telemetry_power_cap_alone_is_not_throttling(host: SimHost, nvml: Any) -> None:
    host.gpus[0].clock_event_reasons = 0x4
    with NvidiaDevice(0, nvml=nvml) as gpu:
        t = gpu.telemetry()
    assert t.throttled is False
    assert t.power_capped is True


def test_telemetry_unsupported_fields_are_none(host: SimHost, nvml: Any) -> None:
    for name in (
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        host.fail[name] = real.NVML_ERROR_NOT_SUPPORTED
    with NvidiaDevice(0, nvml=nvml) as gpu:
        t = gpu.telemetry()
    assert t.temperature_c is None
    assert t.clock_event_reasons is None
    assert t.throttled is False
    assert t.clock_event_flags == ()
    assert t.sm_clock_mhz == 1980


def test_telemetry_with_older_binding_name(host: SimHost) -> None:
    nvml = make_nvml(host)
    del nvml.nvmlDeviceGetCurrentClocksEventReasons
    host.gpus[0].clock_event_reasons = 0x8
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.telemetry().clock_event_flags == ("hw_slowdown",)
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons.call_count == 1


# --- context telemetry (nvitop) ------------------------------------------------------------------


class _FakeNvitopDevice:
    def __init__(self, index: int | None = None, *, uuid: str | None = None) -> None:
        assert index is None, "nvitop's index is NVML's: the device must be found by UUID"
        assert uuid == "GPU-01234567-89ab-cdef-0123-456789abcdef"
        self.uuid = uuid

    def gpu_utilization(self) -> int:
        return 87

    def memory_utilization(self) -> str:
        return "N/A"  # nvitop's NA is a str

    def memory_used(self) -> int:
        return 4 * GIB

    def memory_total(self) -> int:
        return 80 * GIB

    def temperature(self) -> int:
        return 44

    def processes(self) -> dict[int, Any]:
        return {4242: types.SimpleNamespace(gpu_memory=lambda: 2 * GIB)}


def test_context_telemetry_through_nvitop(nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvitop", types.SimpleNamespace(Device=_FakeNvitopDevice))
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.context_telemetry() == {
            "gpu_utilization_pct": 87,
            "memory_utilization_pct": None,
            "memory_used_bytes": 4 * GIB,
            "memory_total_bytes": 80 * GIB,
            "temperature_c": 44,
            "processes": [{"pid": 4242, "gpu_memory_bytes": 2 * GIB}],
        }


@pytest.mark.parametrize("broken", [None, types.SimpleNamespace()])
def test_context_telemetry_failure_is_empty(
    nvml: Any, monkeypatch: pytest.MonkeyPatch, broken: Any
) -> None:
    monkeypatch.setitem(sys.modules, "nvitop", broken)  # not installed / no Device
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.context_telemetry() == {}


# --- provenance ----------------------------------------------------------------------------------


def test_provenance(nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        gpu.set_counter_update_period_s(0.1)
        prov = gpu.provenance()
    assert prov["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert prov["device"]["device_id"] == "GPU-01234567-89ab-cdef-0123-456789abcdef"
    assert prov["driver_version"] == "550.54.15"
    assert prov["nvml_version"] == "12.550.54.15"
    assert prov["cuda_driver_version"] == "12.4"
    assert prov["torch_version"] == torch.__version__
    assert prov["power_field_scope"] == "GPU"
    assert prov["counter_update_period_s"] == 0.1
    assert prov["cuda_index"] == 0
    assert prov["nvml_index"] == 0
    assert prov["energy_scope"] == "GPU"
    assert prov["c2c_mode"] is None
    assert prov["energy_unavailable_reason"] is None
    assert isinstance(prov["host"], str)


def test_translated_errors_are_operator_db_errors(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_UNKNOWN
        with pytest.raises(OperatorDBError, match=r"\(NVML_ERROR_UNKNOWN\)$"):
            gpu.energy_mj()
