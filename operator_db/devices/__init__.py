"""CPU, NVIDIA (NVML) and fake devices behind one interface; energy windows and power sampling."""

from operator_db.devices.base import (
    CLOCK_EVENT_REASONS,
    POWER_CAP_MASK,
    THROTTLE_MASK,
    Device,
    DeviceIdentity,
    DeviceType,
    PowerSample,
    Telemetry,
    decode_clock_event_reasons,
    measure_update_period_s,
)
from operator_db.devices.cpu import CpuDevice, Rapl
from operator_db.devices.factory import fake_from_settings, open_device, parse_device_spec
from operator_db.devices.fake import FAKE_OPERATIONS, FakeDevice
from operator_db.devices.nvidia import NvidiaDevice
from operator_db.devices.nvml import nvml_available, nvml_errors, translate_nvml_error
from operator_db.devices.power import (
    EnergyWindow,
    EnergyWindowResult,
    PowerSampler,
    integrate_power_mj,
    sampling_interval_s,
)

__all__ = [
    "CLOCK_EVENT_REASONS",
    "FAKE_OPERATIONS",
    "POWER_CAP_MASK",
    "THROTTLE_MASK",
    "CpuDevice",
    "Device",
    "DeviceIdentity",
    "DeviceType",
    "EnergyWindow",
    "EnergyWindowResult",
    "FakeDevice",
    "NvidiaDevice",
    "PowerSample",
    "PowerSampler",
    "Rapl",
    "Telemetry",
    "decode_clock_event_reasons",
    "fake_from_settings",
    "integrate_power_mj",
    "measure_update_period_s",
    "nvml_available",
    "nvml_errors",
    "open_device",
    "parse_device_spec",
    "sampling_interval_s",
    "translate_nvml_error",
]
