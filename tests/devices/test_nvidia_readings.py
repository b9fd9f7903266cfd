"""NvidiaDevice readings on a simulated NVML: C2C (Grace Hopper) scope."""

from __future__ import annotations

from typing import Any

import pynvml as real
import pytest

from operator_db.devices import NvidiaDevice
from operator_db.errors import DeviceError
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
