"""NvidiaDevice readings on a simulated NVML: C2C (Grace Hopper) scope, choosing power sources,
NVML functions missing from old bindings or drivers, violation counters, the power period."""

from __future__ import annotations

from typing import Any

import pynvml as real
import pytest

from operator_db.devices import CpuDevice, EnergyWindow, FakeDevice, NvidiaDevice, PowerSampler
from operator_db.devices.nvml import NVML_ERROR_TABLE
from operator_db.errors import DeviceError, PermissionDeniedError
from tests.devices.clock import ManualClock
from tests.devices.nvml_sim import SimGpu, SimHost, make_nvml

GPU_SCOPE = real.NVML_POWER_SCOPE_GPU
MODULE_SCOPE = real.NVML_POWER_SCOPE_MODULE
BOTH_SCOPES = {GPU_SCOPE, MODULE_SCOPE}

pytestmark = pytest.mark.usefixtures("cuda")


def field_scopes_asked(nvml: Any) -> list[int]:
    return [call.args[1][0][1] for call in nvml.nvmlDeviceGetFieldValues.call_args_list]


# --- Grace Hopper: C2C mode and the counter's scope ----------------------------------------------


def test_grace_hopper_with_c2c_uses_module_scope(host: SimHost, nvml: Any) -> None:
    host.gpus[0] = SimGpu(name="NVIDIA GH200 480GB", c2c_enabled=True, field_scopes=BOTH_SCOPES)
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.c2c_mode() is True
        assert gpu.energy_scope() == "MODULE"
        assert gpu.power_scope() == "MODULE"
        assert gpu.power_mw() == (1_700_000_000_000_000, 250_000.0)
        prov = gpu.provenance()
    assert field_scopes_asked(nvml) == [MODULE_SCOPE, MODULE_SCOPE]  # GPU scope never asked
    assert (prov["energy_scope"], prov["power_field_scope"], prov["c2c_mode"]) == (
        "MODULE",
        "MODULE",
        True,
    )
    assert prov["device"]["extra"]["c2c_mode"] is True


def test_without_c2c_gpu_scope(host: SimHost, nvml: Any) -> None:
    host.gpus[0] = SimGpu(name="NVIDIA GH200 480GB", c2c_enabled=False, field_scopes=BOTH_SCOPES)
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.c2c_mode() is False
        assert (gpu.energy_scope(), gpu.power_scope()) == ("GPU", "GPU")
        assert gpu.provenance()["energy_scope"] == "GPU"
    assert field_scopes_asked(nvml) == [GPU_SCOPE]


def test_c2c_unknown_where_the_binding_lacks_the_function(host: SimHost) -> None:
    host.gpus[0].field_scopes = BOTH_SCOPES
    nvml = make_nvml(host)
    del nvml.nvmlDeviceGetC2cModeInfoV
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.c2c_mode() is None
        assert (gpu.energy_scope(), gpu.power_scope()) == ("GPU", "GPU")


def test_c2c_mode_error_other_than_gpu_lost_means_unknown(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlDeviceGetC2cModeInfoV"] = real.NVML_ERROR_FUNCTION_NOT_FOUND
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.c2c_mode() is None
    host.fail["nvmlDeviceGetC2cModeInfoV"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceError, match="GPU is lost"):
        NvidiaDevice(0, nvml=nvml)


def test_c2c_without_module_scope_has_no_power_rather_than_gpu_scope(
    host: SimHost, nvml: Any
) -> None:
    host.gpus[0] = SimGpu(name="NVIDIA GH200 480GB", c2c_enabled=True, field_scopes={GPU_SCOPE})
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() is None
        assert gpu.energy_scope() == "MODULE"
        assert gpu.power_unavailable_reason() == (
            "power unavailable: field 186 (NVML_FI_DEV_POWER_INSTANT): scope GPU: not used: C2C "
            "mode is on, so the energy counter covers the whole module (CPU, GPU and memory); "
            "scope MODULE: NVML could not read instant power (field 186): not supported by this "
            "GPU or driver (NVML_ERROR_NOT_SUPPORTED); nvmlDeviceGetPowerUsage is a 1 s average "
            "on this GPU and is not used"
        )


# --- probing the sources at open: drop what fails, fail only when the GPU is gone ----------------


@pytest.mark.parametrize("code", [real.NVML_ERROR_UNKNOWN, real.NVML_ERROR_GPU_IS_LOST])
def test_per_field_error_drops_that_scope(host: SimHost, nvml: Any, code: int) -> None:
    host.gpus[0].field_scopes = BOTH_SCOPES
    host.gpus[0].field_returns = {GPU_SCOPE: code}
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() == "MODULE"
        assert gpu.power_mw() is not None


def test_per_field_errors_everywhere_leave_a_reason(host: SimHost, nvml: Any) -> None:
    host.gpus[0].field_returns = {
        GPU_SCOPE: real.NVML_ERROR_UNKNOWN,
        MODULE_SCOPE: real.NVML_ERROR_GPU_IS_LOST,
    }
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_mw() is None
        assert gpu.energy_mj() == 5_000_000  # the counter is unaffected
        assert gpu.power_unavailable_reason() == (
            "power unavailable: field 186 (NVML_FI_DEV_POWER_INSTANT): scope GPU: NVML could not "
            "read instant power (field 186): unknown NVML error (NVML_ERROR_UNKNOWN); scope "
            "MODULE: NVML could not read instant power (field 186): the GPU is lost (fell off "
            "the bus); reset it (NVML_ERROR_GPU_IS_LOST); nvmlDeviceGetPowerUsage is a 1 s "
            "average on this GPU and is not used"
        )


def test_whole_call_failure_not_meaning_gone_drops_the_source(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlDeviceGetFieldValues"] = real.NVML_ERROR_UNKNOWN
    host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_TIMEOUT
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.power_scope() is None
        assert gpu.energy_mj() is None
        assert gpu.energy_scope() is None
        assert gpu.energy_unavailable_reason() == (
            "energy unavailable: NVML could not read the energy counter: timed out "
            "(NVML_ERROR_TIMEOUT)"
        )
        reason = gpu.power_unavailable_reason()
    assert reason is not None and "scope GPU: NVML could not read instant power" in reason


@pytest.mark.parametrize(
    "function",
    ["nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"],
)
@pytest.mark.parametrize("code", [real.NVML_ERROR_GPU_IS_LOST, real.NVML_ERROR_GPU_NOT_FOUND])
def test_whole_call_failure_meaning_gone_fails_the_open(
    host: SimHost, nvml: Any, function: str, code: int
) -> None:
    host.gpus[0] = SimGpu(name="NVIDIA A100-SXM4-80GB", arch=real.NVML_DEVICE_ARCH_AMPERE)
    host.gpus[0].field_scopes = set() if function == "nvmlDeviceGetPowerUsage" else {GPU_SCOPE}
    host.fail[function] = code
    with pytest.raises(DeviceError) as info:
        NvidiaDevice(0, nvml=nvml)
    assert str(info.value).endswith(f"({NVML_ERROR_TABLE[code][0]})")
    assert nvml.nvmlShutdown.call_count == 1


# --- NVML functions that old bindings or drivers lack --------------------------------------------


@pytest.mark.parametrize(
    "code", [real.NVML_ERROR_FUNCTION_NOT_FOUND, real.NVML_ERROR_NOT_SUPPORTED]
)
def test_clock_event_reasons_fall_back_when_the_driver_lacks_them(
    host: SimHost, nvml: Any, code: int
) -> None:
    host.fail["nvmlDeviceGetCurrentClocksEventReasons"] = code
    host.gpus[0].clock_event_reasons = 0x20
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.telemetry().clock_event_flags == ("sw_thermal_slowdown",)
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons.call_count == 1
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons.call_count == 1


def test_clock_event_reasons_use_the_new_name_first(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        gpu.telemetry()
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons.call_count == 1
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons.call_count == 0


def test_temperature_uses_the_v_function(host: SimHost, nvml: Any) -> None:
    host.gpus[0].temperature_c = 57
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.telemetry().temperature_c == 57.0
    nvml.nvmlDeviceGetTemperatureV.assert_called_once()
    assert nvml.nvmlDeviceGetTemperatureV.call_args.args[1:] == (real.NVML_TEMPERATURE_GPU,)
    assert nvml.nvmlDeviceGetTemperature.call_count == 0


def test_temperature_without_the_v_function(host: SimHost) -> None:
    nvml = make_nvml(host)
    del nvml.nvmlDeviceGetTemperatureV  # nvidia-ml-py before it had the V form
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.telemetry().temperature_c == 41.0
    assert nvml.nvmlDeviceGetTemperature.call_count == 1


@pytest.mark.parametrize(
    "code", [real.NVML_ERROR_FUNCTION_NOT_FOUND, real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH]
)
def test_temperature_v_missing_in_the_driver_falls_back(
    host: SimHost, nvml: Any, code: int
) -> None:
    host.fail["nvmlDeviceGetTemperatureV"] = code
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.telemetry().temperature_c == 41.0


def test_telemetry_still_raises_when_the_gpu_is_lost(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        host.fail["nvmlDeviceGetTemperatureV"] = real.NVML_ERROR_GPU_IS_LOST
        with pytest.raises(DeviceError, match="GPU is lost"):
            gpu.telemetry()
    assert nvml.nvmlDeviceGetTemperature.call_count == 0


# --- violation counters --------------------------------------------------------------------------


def test_violation_counters_in_microseconds(host: SimHost, nvml: Any) -> None:
    host.gpus[0].violations = {
        real.NVML_PERF_POLICY_POWER: (1_700_000_000_000_000, 2_500_000_999),  # ns
        real.NVML_PERF_POLICY_THERMAL: (1_700_000_000_000_001, 7_000),
    }
    with NvidiaDevice(0, nvml=nvml) as gpu:
        first = gpu.violation_counters_us()
        asked = nvml.nvmlDeviceGetViolationStatus.call_count
        host.gpus[0].violations[real.NVML_PERF_POLICY_POWER] = (1_700_000_001_000_000, 3 * 10**9)
        second = gpu.violation_counters_us()
    assert first == {
        "power_violation_us": 2_500_000,
        "power_reference_us": 1_700_000_000_000_000,
        "thermal_violation_us": 7,
        "thermal_reference_us": 1_700_000_000_000_001,
    }
    assert second["power_violation_us"] - first["power_violation_us"] == 500_000
    assert asked == 8  # every policy once; the 6 unsupported ones are not asked again
    assert nvml.nvmlDeviceGetViolationStatus.call_count == asked + 2


def test_violation_counters_unsupported(host: SimHost) -> None:
    nvml = make_nvml(host)
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.violation_counters_us() == {}  # the driver supports no policy
    del nvml.nvmlDeviceGetViolationStatus
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.violation_counters_us() == {}  # nor has the binding the function


def test_violation_counters_raise_when_the_gpu_is_lost(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        host.fail["nvmlDeviceGetViolationStatus"] = real.NVML_ERROR_GPU_IS_LOST
        with pytest.raises(DeviceError, match="violation time: the GPU is lost"):
            gpu.violation_counters_us()
        host.fail["nvmlDeviceGetViolationStatus"] = real.NVML_ERROR_NO_PERMISSION
        assert gpu.violation_counters_us() == {}


def test_violation_counters_on_other_devices(clock: ManualClock) -> None:
    with CpuDevice() as cpu:
        assert cpu.violation_counters_us() == {}
    fake = FakeDevice(clock=clock, sleep=clock.sleep)
    assert fake.violation_counters_us() == {}
    fake.violation_us["power_violation_us"] = 1_500
    assert fake.violation_counters_us() == {"power_violation_us": 1_500}
    fake.fail_next("telemetry", PermissionDeniedError("no"))
    with pytest.raises(PermissionDeniedError):
        fake.violation_counters_us()


# --- the power reading's own update period -------------------------------------------------------


def test_sampler_polls_at_half_the_power_period_not_the_counters(
    host: SimHost, nvml: Any, clock: ManualClock
) -> None:
    gpu0 = host.gpus[0]
    gpu0.energy_fn = lambda: 5_000_000 + clock() // 100_000_000 * 30_000  # every 100 ms
    gpu0.power_fn = lambda: 250_000 + clock() // 20_000_000 % 7  # a new value every 20 ms
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        assert gpu.known_power_update_period_s() is None
        assert PowerSampler(gpu).interval_s == 0.01
        assert gpu.known_power_update_period_s() == 0.02
        assert gpu.known_update_period_s() is None  # the counter's is not what the sampler uses
        assert gpu.counter_update_period_s() == 0.1
        window = EnergyWindow(gpu)
        assert window._sampler is not None and window._sampler.interval_s == 0.01
        prov = gpu.provenance()
    assert prov["counter_update_period_s"] == 0.1
    assert prov["power_update_period_s"] == 0.02


def test_power_period_can_be_set_and_is_none_without_power(
    host: SimHost, nvml: Any, clock: ManualClock
) -> None:
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        gpu.set_power_update_period_s(0.05)
        assert PowerSampler(gpu).interval_s == 0.025
        with pytest.raises(ValueError, match="period_s must be > 0"):
            gpu.set_power_update_period_s(0)
    host.gpus[0] = SimGpu(name="NVIDIA A10", arch=real.NVML_DEVICE_ARCH_AMPERE, field_scopes=set())
    with NvidiaDevice(0, nvml=nvml, clock=clock, sleep=clock.sleep) as gpu:
        assert gpu.power_update_period_s() is None


# --- power limits and the application-clock restriction (read only, for `opdb doctor`) ----------


def test_power_limits_in_watts(host: SimHost, nvml: Any) -> None:
    host.gpus[0].power_limit_mw = 500_000
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.nvml_gpu.power_limits_w() == {"enforced_w": 500.0, "default_w": 700.0}


def test_power_limits_unsupported_are_none(host: SimHost, nvml: Any) -> None:
    host.fail["nvmlDeviceGetPowerManagementDefaultLimit"] = real.NVML_ERROR_NOT_SUPPORTED
    host.fail["nvmlDeviceGetEnforcedPowerLimit"] = real.NVML_ERROR_NOT_SUPPORTED
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.nvml_gpu.power_limits_w() == {"enforced_w": None, "default_w": None}


def test_application_clocks_restriction(host: SimHost, nvml: Any) -> None:
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.nvml_gpu.application_clocks_restricted() is True
        host.gpus[0].app_clocks_restricted = False
        assert gpu.nvml_gpu.application_clocks_restricted() is False
        host.fail["nvmlDeviceGetAPIRestriction"] = real.NVML_ERROR_NOT_SUPPORTED
        assert gpu.nvml_gpu.application_clocks_restricted() is None
    asked = {call.args[1] for call in nvml.nvmlDeviceGetAPIRestriction.call_args_list}
    assert asked == {real.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS}


def test_application_clocks_restriction_unknown_without_the_function(host: SimHost) -> None:
    nvml = make_nvml(host)
    del nvml.nvmlDeviceGetAPIRestriction
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.nvml_gpu.application_clocks_restricted() is None
