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
    aligned: bool = False
    """The window opened and closed on updates of the energy counter."""

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


ALIGNED_MIN_PERIODS = 2
"""Counter update periods an aligned window spans at least."""

ALIGNED_MIN_CHUNKS = 100
"""Chunks of calls an aligned window spans at least. Each edge is seen up to one chunk after the
update (a chunk is at least one call), the two edges alike: their difference, at most one chunk,
is then at most 1 % of the window."""


@dataclass(frozen=True)
class WindowShape:
    """How one configuration's energy windows run.

    ``aligned``: opened and closed on counter updates; ``length_s``: the least length, in s;
    ``chunk``: calls between two looks at the clock and the telemetry (a tenth of the window);
    ``poll``: calls between two reads of the counter at an aligned window's edges.
    """

    aligned: bool
    length_s: float
    chunk: int
    poll: int


def _timed_length_s(device: Device, settings: MeasureSettings, window_s: float) -> float:
    """Return a timed window's least length, in s.

    At least ``window_s`` and ``energy_window_min_periods`` update periods of the counter: the
    counter may lag by one period at a timed window's end, then at most 1/periods of it (§1).
    """
    period = device.known_update_period_s() or 0.0
    return max(window_s, settings.energy_window_min_periods * period)


def window_shape(device: Device, settings: MeasureSettings, per_call_s: float) -> WindowShape:
    """Return the energy windows of a call taking ``per_call_s`` seconds on ``device``.

    Aligned (``energy_windows``, where the device has an energy counter to align to): at least
    the plan's window, two update periods and ``ALIGNED_MIN_CHUNKS`` chunks of the edge's
    polling. Timed: at least the plan's window and ``energy_window_min_periods`` periods.
    """
    plan = settings.energy_plan()
    aligned = plan.method == "aligned" and device.energy_unavailable_reason() is None
    poll = calls_for(settings.energy_align_poll_s, per_call_s, 1, 10**9)
    if aligned:
        period = device.known_update_period_s() or 0.0
        length = max(
            plan.window_s,
            ALIGNED_MIN_PERIODS * period,
            ALIGNED_MIN_CHUNKS * poll * per_call_s,
        )
    else:
        length = _timed_length_s(device, settings, plan.window_s)
    return WindowShape(aligned, length, calls_for(length / 10, per_call_s, 1, 10**9), poll)


@dataclass(frozen=True)
class _Edge:
    """What waiting for a counter update gave.

    The new value (mJ) and when it was seen (µs), or None for both where the counter did not
    move; and the calls run meanwhile.
    """

    counter_mj: int | None
    at_us: int | None
    calls: int


def _next_update(device: Device, run: Call, calls: int, timeout_s: float, clock: Clock) -> _Edge:
    """Run ``calls`` calls at a time until the energy counter moves, for at most ``timeout_s``.

    After each chunk the device is synchronized (its calls done) and the counter read; the first
    value that differs from the one before is an update, seen within a chunk of when it happened.
    """
    first = device.energy_mj()
    done = 0
    if first is None:
        return _Edge(None, None, done)
    start = clock()
    while (clock() - start) / 1e9 < timeout_s:
        for _ in range(calls):
            run()
        done += calls
        device.synchronize()
        now = device.energy_mj()
        if now is not None and now != first:
            return _Edge(now, device.timestamp_us(), done)
    return _Edge(None, None, done)


def energy_trial(
    run: Call,
    device: Device,
    settings: MeasureSettings,
    *,
    index: int,
    per_call_s: float,
    gap_s: float,
    sleep: Sleep,
    clock: Clock = time.perf_counter_ns,
) -> EnergyTrial:
    """Run one energy window after an idle gap of ``gap_s`` seconds and a warm-up.

    The warm-up runs the call for the plan's ``warmup_s`` before the window opens, so the window
    holds neither the power's rise time nor, through the counter's lag, the idle gap (METHODOLOGY
    §1). The window (see :func:`window_shape`) then runs ``energy_window_min_calls`` calls, and
    chunks of calls until its length has passed on the clock: its length does not rest on the
    timing's per-call estimate (``per_call_s``, s), which a burst of noise may have inflated. An
    aligned window opens on the first counter update seen after the warm-up and closes on the
    first one seen after its length; where the counter does not move within 20 periods (or 1 s),
    it goes on as a timed window of the timed length instead. The telemetry is read before,
    between chunks and after.

    Raises:
        DeviceError: the device failed while reading energy.
    """
    shape = window_shape(device, settings, per_call_s)
    chunk = shape.chunk
    # Prepared before the gap and the warm-up: the first window on a device measures the power
    # reading's period (for its sampler) by polling it, which must not idle between the warm-up
    # and the window (a lagging counter would reach back into that idle time).
    window = EnergyWindow(device)
    if gap_s:
        sleep(gap_s)
    warmup_s = settings.energy_plan().warmup_s
    if warmup_s > 0:
        start = clock()
        while (clock() - start) / 1e9 < warmup_s:
            for _ in range(chunk):
                run()
    length_s = shape.length_s
    before, mask = _telemetry(device)
    masks = [mask]
    counters = _violations(device)
    timeout_s = max(1.0, 20 * (device.known_update_period_s() or 0.05))
    with window:
        opened = _next_update(device, run, shape.poll, timeout_s, clock) if shape.aligned else None
        if opened is not None and opened.counter_mj is None:
            length_s = _timed_length_s(device, settings, length_s)
        start = clock()
        for _ in range(settings.energy_window_min_calls):
            run()
        calls = settings.energy_window_min_calls
        while (clock() - start) / 1e9 < length_s:
            for _ in range(chunk):
                run()
            calls += chunk
            masks.append(_telemetry(device)[1])
        closed = None
        if opened is not None and opened.counter_mj is not None:
            closed = _next_update(device, run, shape.poll, timeout_s, clock)
    after, mask = _telemetry(device)
    masks.append(mask)
    violation = _violation_deltas(counters, _violations(device))
    assert window.result is not None
    result = window.result
    aligned = closed is not None and closed.counter_mj is not None
    if opened is not None and not aligned:
        # Not aligned after all: the window as timed, with every call it held.
        calls += opened.calls + (closed.calls if closed is not None else 0)
    elif opened is not None and closed is not None:
        # From the update seen at the start to the one seen at the end, and the calls between.
        assert opened.counter_mj is not None and closed.counter_mj is not None
        assert opened.at_us is not None and closed.at_us is not None
        calls += closed.calls
        result = dataclasses.replace(
            result,
            start_us=opened.at_us,
            end_us=closed.at_us,
            counter_mj=closed.counter_mj - opened.counter_mj,
            integrated_mj=integrate_power_mj(result.samples, opened.at_us, closed.at_us)
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
        aligned=aligned,
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
    """Run the plan's trials of one call's energy windows, each after a random idle gap.

    See :func:`energy_trial`; ``per_call_s`` is the call's time, in s.
    """
    return [
        energy_trial(
            run,
            device,
            settings,
            index=index,
            per_call_s=per_call_s,
            gap_s=rng.uniform(0.0, settings.max_gap_s),
            sleep=sleep,
            clock=clock,
        )
        for index in range(settings.energy_plan().trials)
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
