"""Energy trials: windows of a call after an idle gap and a warm-up, and the idle baseline.

METHODOLOGY §1: several trials, each after a random idle gap, each a window of at least
``energy_window_s`` and ``energy_window_min_calls`` calls, read from the energy counter and from
integrated power samples, with the telemetry read around and inside the window.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any

from operator_db.devices.base import Clock, Device, Sleep, Telemetry
from operator_db.devices.power import EnergyWindow, EnergyWindowResult, integrate_power_mj
from operator_db.errors import DeviceError
from operator_db.measure.settings import MeasureSettings
from operator_db.measure.timing import Call, calls_for


@dataclass(frozen=True)
class EnergyTrial:
    """One energy window: its idle gap before, its calls, the window and the telemetry around it.

    ``clock_event_reasons`` is the OR of the clock-event masks read at the window's start, between
    its chunks of calls (about ten times) and at its end, so a power cap or a slowdown inside the
    window is seen, not only at its edges; ``throttled`` and ``power_capped`` derive from it.
    """

    index: int
    gap_s: float
    calls: int
    window: EnergyWindowResult
    telemetry_start: dict[str, Any]
    telemetry_end: dict[str, Any]
    throttled: bool
    power_capped: bool
    clock_event_reasons: int | None = None
    telemetry_reads: int = 0
    """How many telemetry reads ``clock_event_reasons`` combines."""
    violation_us: dict[str, int] = field(default_factory=dict)
    """Time the clocks were held below target over the window, per policy (``power``,
    ``thermal``, ...), in µs: the difference of the device's violation counters."""

    @property
    def time_per_call_s(self) -> float:
        """Window length / calls, in s: the per-call time in the window's thermal regime."""
        return self.window.duration_s / self.calls

    @property
    def energy_per_call_j(self) -> float | None:
        """Window energy / calls, in J."""
        e = self.window.energy_mj
        return None if e is None else e / 1000 / self.calls

    def dynamic_per_call_j(self, idle_power_w: float | None) -> float | None:
        """(Window energy − idle power × window length) / calls, in J."""
        e = self.window.energy_mj
        if e is None or idle_power_w is None:
            return None
        return (e / 1000 - idle_power_w * self.window.duration_s) / self.calls


def _telemetry(device: Device) -> tuple[dict[str, Any], int | None]:
    """Read the device's telemetry: (JSON-ready dict, clock-event mask or None)."""
    try:
        t = device.telemetry()
    except DeviceError as exc:
        return {"error": str(exc)}, None
    return t.as_dict(), t.clock_event_reasons


def energy_window_s(device: Device, settings: MeasureSettings) -> float:
    """Return the length of an energy window on ``device``, in s.

    At least ``energy_window_s``, and at least ``energy_window_min_periods`` update periods of the
    energy counter: the counter may lag by one period at the window's end (METHODOLOGY §1), which is
    then at most 1/``energy_window_min_periods`` of the window. An aligned window
    (``energy_aligned``) opens and closes on updates: two periods are enough there.
    """
    period = device.known_update_period_s() or 0.0
    periods = ALIGNED_MIN_PERIODS if settings.energy_aligned else settings.energy_window_min_periods
    return max(settings.energy_window_s, periods * period)


ALIGNED_MIN_PERIODS = 2
"""Counter update periods an aligned window spans at least."""


def _next_update(
    device: Device, run: Call, calls: int, timeout_s: float, clock: Clock
) -> tuple[int, int, int] | None:
    """Run ``calls`` calls at a time until the energy counter moves: (counter, µs, calls run).

    After each chunk the device is synchronized (its calls done) and the counter read; the first
    value that differs from the one before is an update, seen within a chunk of when it happened.
    None where the counter does not move within ``timeout_s`` (or cannot be read).
    """
    first = device.energy_mj()
    if first is None:
        return None
    done = 0
    start = clock()
    while (clock() - start) / 1e9 < timeout_s:
        for _ in range(calls):
            run()
        done += calls
        device.synchronize()
        now = device.energy_mj()
        if now is not None and now != first:
            return now, device.timestamp_us(), done
    return None


def energy_chunk(device: Device, settings: MeasureSettings, per_call_s: float) -> int:
    """Return the calls run between two looks at the clock (and the telemetry) in a window."""
    return calls_for(energy_window_s(device, settings) / 10, per_call_s, 1, 10**9)


def energy_trial(
    run: Call,
    device: Device,
    settings: MeasureSettings,
    *,
    index: int,
    chunk: int,
    gap_s: float,
    sleep: Sleep,
    clock: Clock = time.perf_counter_ns,
) -> EnergyTrial:
    """Run one energy window after an idle gap of ``gap_s`` seconds and a warm-up.

    The warm-up runs the call for ``energy_warmup_s`` before the window opens, so the window does
    not hold the power's rise time (METHODOLOGY §1). The window then runs
    ``energy_window_min_calls`` calls, and chunks of ``chunk`` calls until its length (see
    :func:`energy_window_s`) has passed on the clock: its length does not rest on the timing's
    per-call estimate, which a burst of noise may have inflated. The telemetry is read before,
    between chunks and after.

    Raises:
        DeviceError: the device failed while reading energy.
    """
    if gap_s:
        sleep(gap_s)
    if settings.energy_warmup_s > 0:
        start = clock()
        while (clock() - start) / 1e9 < settings.energy_warmup_s:
            for _ in range(chunk):
                run()
    length_s = energy_window_s(device, settings)
    before, mask = _telemetry(device)
    masks = [mask]
    counters = _violations(device)
    poll = max(1, round(chunk * settings.energy_align_poll_s / max(length_s / 10, 1e-9)))
    timeout_s = max(1.0, 20 * (device.known_update_period_s() or 0.05))
    with EnergyWindow(device) as window:
        opened = (
            _next_update(device, run, poll, timeout_s, clock) if settings.energy_aligned else None
        )
        start = clock()
        for _ in range(settings.energy_window_min_calls):
            run()
        calls = settings.energy_window_min_calls
        while (clock() - start) / 1e9 < length_s:
            for _ in range(chunk):
                run()
            calls += chunk
            masks.append(_telemetry(device)[1])
        closed = _next_update(device, run, poll, timeout_s, clock) if opened else None
    after, mask = _telemetry(device)
    masks.append(mask)
    violation = _violation_deltas(counters, _violations(device))
    assert window.result is not None
    result = window.result
    if opened is not None and closed is None:
        calls += opened[2]  # no update at the end: the window as timed, its first calls too
    if opened is not None and closed is not None:
        # From the update seen at the start to the one seen at the end, and the calls between.
        calls += closed[2]
        result = dataclasses.replace(
            result,
            start_us=opened[1],
            end_us=closed[1],
            counter_mj=closed[0] - opened[0],
            integrated_mj=integrate_power_mj(result.samples, opened[1], closed[1])
            if result.samples
            else None,
        )
    seen = [m for m in masks if m is not None]
    reasons = None
    if seen:
        reasons = 0
        for m in seen:
            reasons |= m
    state = Telemetry(timestamp_us=0, clock_event_reasons=reasons)
    return EnergyTrial(
        index,
        gap_s,
        calls,
        result,
        before,
        after,
        state.throttled or violation.get("thermal", 0) > 0,
        state.power_capped or violation.get("power", 0) > 0,
        clock_event_reasons=reasons,
        telemetry_reads=len(seen),
        violation_us=violation,
    )


def _violations(device: Device) -> dict[str, int]:
    """Read the device's violation counters (µs); {} where it has none or the read failed."""
    try:
        return device.violation_counters_us()
    except DeviceError:
        return {}


def _violation_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Return the violation time per policy between two reads, in µs (``*_violation_us`` keys)."""
    return {
        key.removesuffix("_violation_us"): after[key] - before[key]
        for key in after
        if key.endswith("_violation_us") and key in before
    }


def energy_trials(
    run: Call,
    device: Device,
    settings: MeasureSettings,
    per_call_s: float,
    *,
    sleep: Sleep,
    rng: random.Random,
    clock: Clock = time.perf_counter_ns,
) -> list[EnergyTrial]:
    """Run ``trials`` energy windows of one call, each after a random idle gap.

    See :func:`energy_trial`.
    """
    chunk = energy_chunk(device, settings, per_call_s)
    return [
        energy_trial(
            run,
            device,
            settings,
            index=index,
            chunk=chunk,
            gap_s=rng.uniform(0.0, settings.max_gap_s),
            sleep=sleep,
            clock=clock,
        )
        for index in range(settings.trials)
    ]


def energy_unavailable(device: Device) -> str | None:
    """Return why ``device`` can give no energy at all, or None if a counter or power exists."""
    counter = device.energy_unavailable_reason()
    power = device.power_unavailable_reason()
    if counter is None or power is None:
        return None
    return counter


def idle_power_w(device: Device, window_s: float, *, sleep: Sleep = time.sleep) -> float | None:
    """Measure the idle power over ``window_s`` seconds, in W; None without energy."""
    if energy_unavailable(device) is not None:
        return None
    with EnergyWindow(device) as window:
        sleep(window_s)
    assert window.result is not None
    return window.result.mean_power_w
