"""The device interface: identity, energy counter (mJ), instant power (mW), telemetry."""

from __future__ import annotations

import abc
import platform
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, NamedTuple, Self

import torch

from operator_db.devices.host_cpu import host_cpu
from operator_db.errors import DeviceError

DeviceType = Literal["gpu", "cpu", "fake"]
"""What sort of device: a GPU, a CPU, or the fake device of tests. A *device kind* is something
else: one model of chip (``device_kinds.name``, e.g. ``NVIDIA H100 80GB HBM3``), whose ``type`` is
one of these."""

Clock = Callable[[], int]
"""A monotonic clock in nanoseconds, like ``time.perf_counter_ns``."""

Sleep = Callable[[float], None]
"""A sleep function taking seconds, like ``time.sleep``."""

# Clock-event ("throttle") reasons: bits of nvmlDeviceGetCurrentClocksEventReasons (METHODOLOGY §1).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80
"""Reasons that flag a trial: HW slowdown, SW thermal, HW thermal, power brake."""
POWER_CAP_MASK = 0x4
"""SW power cap: noted, not flagged (a GPU at its power limit is normal under load)."""


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Name the bits set in a clock-event-reason ``mask``; unknown bits come out as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(hex(unknown))
    return tuple(names)


class PowerSample(NamedTuple):
    """One instant power reading: its own timestamp (µs, in the device's time base) and mW."""

    timestamp_us: int
    power_mw: float


@dataclass(frozen=True)
class DeviceIdentity:
    """What a device is. ``name`` is the device-kind name measurements are stored under.

    ``device_id`` tells devices of one host apart (the NVML UUID for GPUs, ``"cpu"`` for the CPU).
    """

    device_type: DeviceType
    name: str
    vendor: str
    device_id: str
    architecture: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready copy."""
        return asdict(self)


@dataclass(frozen=True)
class Telemetry:
    """Device state at one moment (METHODOLOGY §1, "Clocks and throttling"); None = not readable."""

    timestamp_us: int
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    clock_event_reasons: int | None = None

    @property
    def throttled(self) -> bool:
        """True when HW slowdown, SW/HW thermal slowdown or power brake is active."""
        return bool((self.clock_event_reasons or 0) & THROTTLE_MASK)

    @property
    def power_capped(self) -> bool:
        """True when the SW power cap holds clocks down (noted, not flagged)."""
        return bool((self.clock_event_reasons or 0) & POWER_CAP_MASK)

    @property
    def clock_event_flags(self) -> tuple[str, ...]:
        """The names of the active clock-event reasons."""
        if self.clock_event_reasons is None:
            return ()
        return decode_clock_event_reasons(self.clock_event_reasons)

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready copy, with the decoded flags."""
        out = asdict(self)
        out["clock_event_flags"] = list(self.clock_event_flags)
        out["throttled"] = self.throttled
        out["power_capped"] = self.power_capped
        return out


def measure_update_period_s(
    probe: Callable[[], object],
    *,
    clock: Clock = time.perf_counter_ns,
    sleep: Sleep = time.sleep,
    repeats: int = 5,
    poll_interval_s: float = 0.0005,
    timeout_s: float = 3.0,
) -> float:
    """Measure how often ``probe()`` changes value, in seconds: the median of ``repeats`` gaps.

    Polls every ``poll_interval_s``. Each change happened between the last poll that saw the old
    value and the first that saw the new one; it is timed at that bracket's midpoint. The gap
    before the first change is partial and is discarded. The median, not the minimum: a poll that
    wakes late (a loaded host) moves one change late, which lengthens one gap and shortens the
    next by as much (a 5 ms counter read 1.2 ms by the minimum on CI). If the timeout ends the
    search after at least one full gap, the median so far is returned.

    Raises:
        DeviceError: fewer than two changes were seen within ``timeout_s``.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    deadline = clock() + int(timeout_s * 1e9)
    gaps: list[float] = []
    last_value = probe()
    last_poll = clock()
    last_change: float | None = None
    while len(gaps) < repeats:
        if last_poll >= deadline:
            break
        sleep(poll_interval_s)
        value = probe()
        now = clock()
        if value != last_value:
            change = (last_poll + now) / 2
            if last_change is not None:
                gaps.append(change - last_change)
            last_change = change
            last_value = value
        last_poll = now
    if not gaps:
        raise DeviceError(
            f"the energy/power reading did not change twice within {timeout_s:g} s; "
            "cannot measure its update period"
        )
    return statistics.median(gaps) / 1e9


class Device(abc.ABC):
    """One measurable device. Units are in the method names; nothing is opened at import time.

    Subclasses open their handles in ``__init__`` and release them in ``close()`` (no ``__del__``).
    Devices are context managers.
    """

    device_type: ClassVar[DeviceType]

    def __init__(self, *, clock: Clock = time.perf_counter_ns, sleep: Sleep = time.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._update_period_s: float | None = None
        self._power_period_s: float | None = None
        self._closed = False

    # identity ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def identity(self) -> DeviceIdentity:
        """Return what this device is (read once when it was opened)."""

    def kind_name(self) -> str:
        """Return the device-kind name measurements are stored under."""
        return self.identity().name

    @abc.abstractmethod
    def torch_device(self) -> torch.device:
        """Return the torch device operators run on (``cuda:i``, or ``cpu``)."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until all work queued on the device is done."""

    def activate(self) -> None:
        """Make this device the current one of the process (``torch.cuda.set_device`` on GPUs).

        CUDA events, streams and graphs are created on the current device, so measuring code must
        run with the measured device current. GPU devices do this in ``torch_device()``; this
        method does it explicitly. Nothing to do for the CPU and the fake device.
        """
        return None

    # energy and power -------------------------------------------------------------------------

    @abc.abstractmethod
    def energy_mj(self) -> int | None:
        """Return the cumulative energy counter in mJ, or None when the device has none.

        Only differences between two reads mean anything.

        Raises:
            DeviceError: the read failed (PermissionDeniedError when it is not allowed).
        """

    @abc.abstractmethod
    def energy_unavailable_reason(self) -> str | None:
        """Say why ``energy_mj()`` returns None (``"energy unavailable: ..."``), or None."""

    @abc.abstractmethod
    def power_mw(self) -> PowerSample | None:
        """Return one instant power sample (mW, with its own timestamp in µs), or None.

        Raises:
            DeviceError: the read failed.
        """

    @abc.abstractmethod
    def power_unavailable_reason(self) -> str | None:
        """Say why ``power_mw()`` returns None (``"power unavailable: ..."``); None if it works."""

    def power_scope(self) -> str | None:
        """Return what the power samples cover (e.g. ``"GPU"``, ``"MODULE"``), or None."""
        return None

    def energy_scope(self) -> str | None:
        """Return what the energy counter covers (e.g. ``"GPU"``, ``"MODULE"``), or None."""
        return None

    def violation_counters_us(self) -> dict[str, int]:
        """Return cumulative clock-limit violation counters in µs; {} where there are none.

        Keys are ``<policy>_violation_us`` (time the clocks were held below target by that
        policy, e.g. ``power`` or ``thermal``) and ``<policy>_reference_us`` (the timestamp of the
        reading, µs). Only differences between two reads mean anything.

        Raises:
            DeviceError: the device failed (unsupported policies are left out instead).
        """
        return {}

    def timestamp_us(self) -> int:
        """Return now in µs, in the time base of ``power_mw()`` sample timestamps."""
        return self._clock() // 1000

    def _update_probe(self) -> Callable[[], object] | None:
        """Return a reading that changes each time the device updates it, or None if none."""
        if self.energy_unavailable_reason() is None:
            return self.energy_mj
        return None

    def _power_probe(self) -> Callable[[], object] | None:
        """Return a reading that changes each time the power reading updates, or None if none."""
        return None

    def counter_update_period_s(self, *, timeout_s: float = 3.0, repeats: int = 5) -> float | None:
        """Return the energy counter's update period in seconds, measured on the first call.

        Devices without a counter measure how often their power reading changes instead. Returns
        None when there is neither (see ``energy_unavailable_reason()``).

        Raises:
            DeviceError: the reading did not change within ``timeout_s``.
        """
        if self._update_period_s is None:
            self._update_period_s = self._measured_period(self._update_probe(), timeout_s, repeats)
        return self._update_period_s

    def known_update_period_s(self) -> float | None:
        """Return the update period if it was measured or set already, without measuring."""
        return self._update_period_s

    def set_counter_update_period_s(self, period_s: float) -> None:
        """Use ``period_s`` (e.g. stored for this host earlier) instead of measuring it."""
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        self._update_period_s = period_s

    def power_update_period_s(self, *, timeout_s: float = 3.0, repeats: int = 5) -> float | None:
        """Return the instant power reading's update period in seconds, measured on the first call.

        It is not the counter's: on NVIDIA GPUs field 186 and the energy counter update at their
        own rates. The power sampler polls at half this period. None without a power reading.

        Raises:
            DeviceError: the reading did not change within ``timeout_s``.
        """
        if self._power_period_s is None:
            self._power_period_s = self._measured_period(self._power_probe(), timeout_s, repeats)
        return self._power_period_s

    def _measured_period(
        self, probe: Callable[[], object] | None, timeout_s: float, repeats: int
    ) -> float | None:
        """Measure how often ``probe`` changes, in s (None without a probe)."""
        if probe is None:
            return None
        return measure_update_period_s(
            probe, clock=self._clock, sleep=self._sleep, repeats=repeats, timeout_s=timeout_s
        )

    def known_power_update_period_s(self) -> float | None:
        """Return the power update period if it was measured or set already, without measuring."""
        return self._power_period_s

    def set_power_update_period_s(self, period_s: float) -> None:
        """Use ``period_s`` as the power reading's update period instead of measuring it."""
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        self._power_period_s = period_s

    # telemetry and provenance -----------------------------------------------------------------

    @abc.abstractmethod
    def telemetry(self) -> Telemetry:
        """Return clocks, temperature, power limit and clock-event reasons now.

        Raises:
            DeviceError: the device failed (unsupported fields come back as None instead).
        """

    def context_telemetry(self) -> dict[str, Any]:
        """Return slow context telemetry (utilization, memory, processes); {} when unavailable."""
        return {}

    def provenance(self) -> dict[str, Any]:
        """Return what METHODOLOGY §6 stores with every measurement that the device knows."""
        ident = self.identity()
        cudnn = (
            torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
            if torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
            else None
        )
        return {
            "host": socket.gethostname(),
            "platform": platform.platform(),
            "device": ident.as_dict(),
            "driver_version": ident.driver_version,
            "nvml_version": ident.nvml_version,
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "cudnn_version": cudnn,
            "torch_threads": torch.get_num_threads(),
            "host_cpu": host_cpu(),
            "power_field_scope": self.power_scope(),
            "energy_scope": self.energy_scope(),
            "counter_update_period_s": self._update_period_s,
            "power_update_period_s": self._power_period_s,
            "energy_unavailable_reason": self.energy_unavailable_reason(),
            "power_unavailable_reason": self.power_unavailable_reason(),
        }

    # lifetime ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran."""
        return self._closed

    def close(self) -> None:
        """Release the device's handles; calling it again does nothing."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind_name()!r}>"
