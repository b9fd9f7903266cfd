"""Energy checks for any device: counter, power reading, idle power, agreement, sampler cost.

The counter and the instant power reading with their update periods, the idle power, the counter
against integrated power on short windows, and what the power sampler costs a small op.

The windows here have their edges on counter updates: the doctor waits for the counter to change
before it starts the clock and again after the window, so a 2 s window compares the counter and the
integrated power over the same stretch of time, whatever the counter's update period (a counter
that moves every 100 ms would otherwise be up to 5 % short on 2 s). Measurement windows have no
such alignment; they last at least 50 update periods instead (docs/measurement.md).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from operator_db.config import Settings
from operator_db.devices.base import Clock, Device, Sleep
from operator_db.devices.power import (
    EnergyWindowResult,
    PowerSampler,
    integrate_power_mj,
    sampling_interval_s,
)
from operator_db.doctor.report import Check, fail, ok, warn
from operator_db.errors import DeviceError

Call = Callable[[], object]
"""One unit of work on the device (a few kernels); the doctor synchronizes after each."""

POLL_S = 0.0005
"""How often the doctor reads the counter while it waits for an update, in s."""


def matmul_load(device: torch.device) -> Call:
    """Return ten float32 matmuls of n×n matrices on ``device`` (n = 2048 on a GPU, 256 else)."""
    n = 2048 if device.type == "cuda" else 256
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    out = torch.empty(n, n, device=device)

    def run() -> None:
        for _ in range(10):
            torch.mm(a, b, out=out)

    return run


def small_add(device: torch.device) -> Call:
    """Return one addition of two 1024-element float32 vectors on ``device`` (a µs-scale op)."""
    a = torch.randn(1024, device=device)
    b = torch.randn(1024, device=device)
    out = torch.empty(1024, device=device)
    return lambda: torch.add(a, b, out=out)


@dataclass(frozen=True)
class Workload:
    """What the doctor runs: a load for the busy window, a small op for the sampler's cost."""

    load: Callable[[torch.device], Call] = matmul_load
    small_op: Callable[[torch.device], Call] = small_add


def ms(seconds: float | None) -> str:
    """Format seconds as milliseconds for the table (``"100 ms"``, ``"0.98 ms"``)."""
    if seconds is None:
        return "unknown"
    value = seconds * 1000
    return f"{value:.3g} ms"


def pct(ratio: float) -> str:
    """Format a ratio as a signed percentage (``"+1.2 %"``)."""
    return f"{ratio * 100:+.1f} %"


def _update_period(
    name: str, title: str, measure: Callable[[], float | None], consequence: str
) -> float | Check | None:
    """Return a reading's update period (s; None: unknown), or the failed check saying why not."""
    try:
        return measure()
    except DeviceError as exc:
        return fail(
            name,
            title,
            f"present, but its update period cannot be measured: {exc}",
            consequence,
            present=True,
        )


def counter_check(
    device: Device, timeout_s: float, *, title: str = "energy counter", fix: str = ""
) -> Check:
    """Say whether the device has an energy counter, what it covers and its update period.

    warn: no counter (energy from integrated power, or none); fail: a counter whose update period
    cannot be measured (the worker measures it when it starts, and would stop there).
    """
    reason = device.energy_unavailable_reason()
    if reason is not None:
        instead = device.power_unavailable_reason() is None
        value = reason + ("; integrated power is used instead" if instead else "")
        action = fix or (
            "energy per call comes from integrated power alone"
            if instead
            else "times are measured; energy is not"
        )
        return warn("energy_counter", title, value, action, present=False)
    period = _update_period(
        "energy_counter",
        title,
        lambda: device.counter_update_period_s(timeout_s=timeout_s),
        "the worker measures this period when it starts and would stop: check that the "
        "device is healthy (nvidia-smi on a GPU) and run the doctor again",
    )
    if isinstance(period, Check):
        return period
    scope = device.energy_scope()
    where = f" (scope {scope})" if scope else ""
    return ok(
        "energy_counter",
        title,
        f"present{where}, updates every {ms(period)}",
        present=True,
        scope=scope,
        update_period_s=period,
    )


def power_check(
    device: Device, timeout_s: float, *, title: str = "instant power", note: str = ""
) -> Check:
    """Say whether the device has an instant power reading, its scope and own update period.

    warn: none (the counter's windows cannot be cross-checked); fail: a reading whose update period
    cannot be measured (the first energy window would stop there).
    """
    reason = device.power_unavailable_reason()
    if reason is not None:
        counter = device.energy_unavailable_reason() is None
        action = (
            "energy comes from the counter alone; windows are not cross-checked against "
            "integrated power"
            if counter
            else "times are measured; energy is not"
        )
        return warn("power", title, reason, action, present=False)
    period = _update_period(
        "power",
        title,
        lambda: device.power_update_period_s(timeout_s=timeout_s),
        "the first energy window measures this period and would fail: check the device",
    )
    if isinstance(period, Check):
        return period
    interval = sampling_interval_s(period)
    scope = device.power_scope()
    return ok(
        "power",
        title,
        f"scope {scope}{note}, updates every {ms(period)}; the sampler polls every {ms(interval)}",
        present=True,
        scope=scope,
        update_period_s=period,
        poll_interval_s=interval,
    )


def _at_update(device: Device, clock: Clock, sleep: Sleep, timeout_s: float) -> tuple[int, int]:
    """Wait until the energy counter changes; return its new value (mJ) and the time (µs).

    Raises:
        DeviceError: it did not change within ``timeout_s``, or a read failed.
    """
    first = device.energy_mj()
    deadline = clock() + int(timeout_s * 1e9)
    while clock() < deadline:
        sleep(POLL_S)
        value = device.energy_mj()
        if value is not None and value != first:
            return value, device.timestamp_us()
    raise DeviceError(f"the energy counter did not change within {timeout_s:g} s")


def measure_window(
    device: Device,
    duration_s: float,
    work: Call | None,
    *,
    clock: Clock,
    sleep: Sleep,
    timeout_s: float,
) -> tuple[EnergyWindowResult, int]:
    """Read the counter and integrate power over one window: idle (``work`` None) or busy.

    The window opens and closes on counter updates (see the module's docstring); busy, it runs
    ``work`` (then synchronizes) until ``duration_s`` has passed. Returns the window and the number
    of ``work`` calls.

    Raises:
        DeviceError: a read failed, or the counter did not move within ``timeout_s``.
    """
    counted = device.energy_unavailable_reason() is None
    sampler = PowerSampler(device) if device.power_unavailable_reason() is None else None
    if sampler is not None:
        sampler.start()
    calls = 0
    try:
        device.synchronize()
        if counted:
            counter_start, start_us = _at_update(device, clock, sleep, timeout_s)
        else:
            counter_start, start_us = 0, device.timestamp_us()
        begin = clock()
        if work is None:
            sleep(duration_s)
        while work is not None and (clock() - begin) / 1e9 < duration_s:
            work()
            device.synchronize()
            calls += 1
        if counted:
            counter_end, end_us = _at_update(device, clock, sleep, timeout_s)
        else:
            counter_end, end_us = 0, device.timestamp_us()
    except BaseException:
        if sampler is not None:
            sampler.abort()
        raise
    samples = sampler.stop() if sampler is not None else []
    window = EnergyWindowResult(
        start_us=start_us,
        end_us=end_us,
        counter_mj=counter_end - counter_start if counted else None,
        integrated_mj=integrate_power_mj(samples, start_us, end_us) if samples else None,
        samples=tuple(samples),
        energy_unavailable_reason=device.energy_unavailable_reason(),
        power_unavailable_reason=device.power_unavailable_reason(),
    )
    return window, calls


def window_data(window: EnergyWindowResult) -> dict[str, object]:
    """Return a window's figures for a check's data (mJ, s, W; no raw samples)."""
    return {
        "duration_s": window.duration_s,
        "counter_mj": window.counter_mj,
        "integrated_mj": window.integrated_mj,
        "disagreement": window.disagreement,
        "mean_power_w": window.mean_power_w,
        "samples": len(window.samples),
    }


def idle_check(device: Device, window: EnergyWindowResult) -> Check:
    """Say the idle power over ``window``; warn where other processes use the device."""
    power = window.mean_power_w
    source = "counter" if window.counter_mj is not None else "integrated power"
    value = f"{power:.1f} W over {window.duration_s:.2f} s ({source})" if power is not None else ""
    others = [
        p.get("pid")
        for p in device.context_telemetry().get("processes", [])
        if p.get("pid") != os.getpid()
    ]
    data = {**window_data(window), "other_processes": others}
    if others:
        return warn(
            "idle_power",
            "idle power",
            f"{value}; {len(others)} other process(es) on the device (pids {others})",
            "measure on an otherwise idle device: their work shows in idle power, energy and times",
            **data,
        )
    return ok("idle_power", "idle power", value, **data)


def agreement_check(
    name: str, label: str, window: EnergyWindowResult, limit: float
) -> Check | None:
    """Compare the counter with integrated power over ``window``; None unless both exist.

    fail: they differ by more than ``limit`` (the ``disagreement_limit`` setting, 5 %): every
    energy window on this host would then disagree (flag ``energy_disagreement``).
    """
    if window.counter_mj is None or window.integrated_mj is None:
        return None
    title = f"counter vs power, {label}"
    figures = (
        f"counter {window.counter_mj / 1000:.2f} J, integrated {window.integrated_mj / 1000:.2f} J"
        f" over {window.duration_s:.2f} s"
    )
    data = {**window_data(window), "limit": limit}
    d = window.disagreement
    if d is None:
        return warn(
            name,
            title,
            f"{figures}: the counter did not move",
            "a longer window (--window) may help",
            **data,
        )
    value = f"{figures}: {pct(d)} (limit ±{limit * 100:g} %)"
    if abs(d) > limit:
        return fail(
            name,
            title,
            value,
            "the counter and the power reading do not measure the same thing: check the power "
            "field's scope (GPU vs MODULE, C2C mode) and the driver; energies here would be "
            "flagged energy_disagreement",
            **data,
        )
    return ok(name, title, value, **data)


def _block_s(op: Call, device: Device, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        op()
    device.synchronize()
    return (time.perf_counter_ns() - start) / 1e9


def overhead_check(
    device: Device, op: Call, settings: Settings, *, block_s: float, pairs: int
) -> Check:
    """Time a small op per call with and without the power sampler running (real clock).

    Blocks of about ``block_s`` alternate, ``pairs`` times, and the medians are compared. warn:
    the sampler slows the op by more than ``window_time_tolerance`` (3 %); the per-call time
    inside energy windows would then differ from the eager timing (flag ``window_time_differs``).
    """
    for _ in range(10):  # warm-up
        op()
    per_call = _block_s(op, device, 100) / 100
    calls = max(1, min(1_000_000, round(block_s / max(per_call, 1e-9))))
    off: list[float] = []
    on: list[float] = []
    for _ in range(pairs):
        off.append(_block_s(op, device, calls))
        sampler = PowerSampler(device)
        sampler.start()
        try:
            on.append(_block_s(op, device, calls))
        finally:
            sampler.stop()
    without = statistics.median(off) / calls
    with_sampler = statistics.median(on) / calls
    overhead = with_sampler / without - 1
    limit = settings.measure.window_time_tolerance
    value = (
        f"{without * 1e6:.2f} µs/call without the sampler, {with_sampler * 1e6:.2f} µs/call with "
        f"it: {pct(overhead)} (limit +{limit * 100:g} %)"
    )
    data = {
        "time_per_call_s": without,
        "time_per_call_sampling_s": with_sampler,
        "overhead": overhead,
        "limit": limit,
        "calls_per_block": calls,
        "pairs": pairs,
    }
    if overhead > limit:
        return warn(
            "sampler_overhead",
            "sampler overhead",
            value,
            "the power sampler's thread slows small ops here: energy-window times may be "
            "flagged window_time_differs; check the CPU is not oversubscribed",
            **data,
        )
    return ok("sampler_overhead", "sampler overhead", value, **data)
