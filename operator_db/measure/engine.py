"""Time and energy of one callable on one device, by METHODOLOGY.md.

The callable is one call of an operator (or a whole model) on inputs allocated once and reused.
Time: warm-up, then blocks of back-to-back calls (CUDA events on a GPU, ``perf_counter_ns`` with a
synchronize elsewhere), per-call time = block time / calls; fast GPU ops are also timed as a CUDA
graph of unrolled calls. Energy: several trials, each after a random idle gap, each a window of at
least ``energy_window_s`` and ``energy_window_min_calls`` calls, read from the energy counter and
from integrated power samples. Every statistic is derived from the raw samples kept in the result.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from operator_db.devices.base import Clock, Device, Sleep
from operator_db.devices.power import EnergyWindow, EnergyWindowResult
from operator_db.errors import DeviceError, MeasurementError
from operator_db.measure.allocator import allocator_state
from operator_db.measure.flags import Flag
from operator_db.measure.settings import MeasureSettings
from operator_db.measure.stats import Summary, summarize
from operator_db.measure.timing import (
    BlockTimer,
    Call,
    Timing,
    calls_for,
    flagged,
    interleaved_calls,
    time_blocks,
    time_cuda_graph,
    warm_up_for,
)


@dataclass(frozen=True)
class EnergyTrial:
    """One energy window: its idle gap before, its calls, the window and the telemetry around it."""

    index: int
    gap_s: float
    calls: int
    window: EnergyWindowResult
    telemetry_start: dict[str, Any]
    telemetry_end: dict[str, Any]
    throttled: bool
    power_capped: bool

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


@dataclass(frozen=True)
class MeasureResult:
    """Everything one measurement produced; statistics are properties over the raw samples."""

    timings: tuple[Timing, ...]
    trials: tuple[EnergyTrial, ...]
    energy_unavailable: str | None
    idle_power_w: float | None
    flags: tuple[Flag, ...]
    provenance: dict[str, Any] = field(default_factory=dict)
    target: str = ""
    """What was measured: the :attr:`Target.name` of an interleaved measurement ("" alone)."""
    cache_mode: str = "warm"
    """How inputs were held between calls (METHODOLOGY §3): ``warm``, reused."""
    threads: int | None = None
    """torch's intra-op threads while measuring."""

    @property
    def eager(self) -> Timing:
        """The eager timing (always present)."""
        return next(t for t in self.timings if t.method == "eager")

    @property
    def energy_per_call(self) -> Summary | None:
        """Statistics over trials of energy per call, in J."""
        values = [v for t in self.trials if (v := t.energy_per_call_j) is not None]
        return summarize(values) if values else None

    @property
    def dynamic_energy_per_call_j(self) -> float | None:
        """Median over trials of dynamic energy per call, in J."""
        values = [
            v for t in self.trials if (v := t.dynamic_per_call_j(self.idle_power_w)) is not None
        ]
        return summarize(values).median if values else None

    @property
    def energy_source(self) -> str | None:
        """'counter', 'power_integration' or 'rapl' (CPU counter); None without energy."""
        sources = sorted({s for t in self.trials if (s := t.window.source) is not None})
        return sources[0] if sources else None

    @property
    def power_mean_w(self) -> float | None:
        """Median over trials of the window's mean power, in W."""
        values = [p for t in self.trials if (p := t.window.mean_power_w) is not None]
        return summarize(values).median if values else None

    @property
    def disagreement(self) -> float | None:
        """Largest relative disagreement of counter and integrated energy over trials."""
        values = [d for t in self.trials if (d := t.window.disagreement) is not None]
        return max(values, key=abs) if values else None

    def raw(self) -> dict[str, Any]:
        """Return the raw samples as JSON-ready data (kept in the database)."""
        return {
            "timings": [
                {
                    "method": t.method,
                    "calls_per_block": t.calls_per_block,
                    "block_s": list(t.block_s),
                    "flags": [str(f) for f in t.flags],
                }
                for t in self.timings
            ],
            "trials": [
                {
                    "index": t.index,
                    "gap_s": t.gap_s,
                    "calls": t.calls,
                    "window": t.window.as_dict(),
                    "telemetry_start": t.telemetry_start,
                    "telemetry_end": t.telemetry_end,
                }
                for t in self.trials
            ],
            "idle_power_w": self.idle_power_w,
        }


def _telemetry(device: Device) -> tuple[dict[str, Any], bool, bool]:
    try:
        t = device.telemetry()
    except DeviceError as exc:
        return {"error": str(exc)}, False, False
    return t.as_dict(), t.throttled, t.power_capped


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
    """Run ``trials`` energy windows, each after a random idle gap.

    A window runs ``energy_window_min_calls`` calls, then chunks of about a tenth of the window
    until ``energy_window_s`` has passed on the clock: its length does not rest on the timing's
    per-call estimate, which a burst of noise may have inflated.
    """
    chunk = calls_for(settings.energy_window_s / 10, per_call_s, 1, 10**9)
    trials = []
    for index in range(settings.trials):
        gap = rng.uniform(0.0, settings.max_gap_s)
        if gap:
            sleep(gap)
        before, throttled_a, capped_a = _telemetry(device)
        calls = 0
        with EnergyWindow(device) as window:
            start = clock()
            for _ in range(settings.energy_window_min_calls):
                run()
            calls = settings.energy_window_min_calls
            while (clock() - start) / 1e9 < settings.energy_window_s:
                for _ in range(chunk):
                    run()
                calls += chunk
        after, throttled_b, capped_b = _telemetry(device)
        assert window.result is not None
        trials.append(
            EnergyTrial(
                index,
                gap,
                calls,
                window.result,
                before,
                after,
                throttled_a or throttled_b,
                capped_a or capped_b,
            )
        )
    return trials


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


def measure(
    run: Call,
    device: Device,
    settings: MeasureSettings,
    *,
    idle_power: float | None = None,
    min_time_s: float = 0.0,
    clock: Clock = time.perf_counter_ns,
    sleep: Sleep = time.sleep,
) -> MeasureResult:
    """Measure ``run`` (one call, reused inputs) on ``device``.

    ``min_time_s`` stretches the timing to at least that many seconds (whole models).

    Raises:
        MeasurementError: the call failed, or produced no usable timing.
        DeviceError: the device failed while reading energy.
    """
    timer = BlockTimer(device, clock)
    rng = random.Random(settings.seed)
    per_call = warm_up_for(run, timer, settings)
    eager = time_blocks(run, timer, settings, per_call, min_time_s)
    return _complete(run, eager, timer, settings, idle_power, rng, sleep, clock)


@dataclass(frozen=True)
class Target:
    """One callable an interleaved measurement times, and what it is."""

    name: str
    """Its identity (a configuration key, ``model``, ``hollow``); its result carries it back."""
    run: Call
    min_time_s: float = 0.0
    """Time the target for at least this many seconds in all (whole models)."""
    energy: bool = True
    """Run energy trials after the rounds (False: timed only)."""


def measure_interleaved(
    targets: Sequence[Target],
    device: Device,
    settings: MeasureSettings,
    *,
    idle_power: float | None = None,
    clock: Clock = time.perf_counter_ns,
    sleep: Sleep = time.sleep,
) -> list[MeasureResult]:
    """Measure several targets with their timing blocks interleaved; one result per target.

    Each target is warmed up; then ``blocks`` rounds each time one block of every target (after
    one untimed call of it), in a seeded random order per round. A slow drift of the machine's
    speed (a noisy neighbour, a clock change) then touches every target alike instead of whichever
    one was being measured at the time, so the operators of a model and the whole model are
    compared at the same moments.
    Unstable timings are flagged, not re-timed (re-timing one target alone would break the
    interleave). CUDA-graph timing and energy trials follow per target, as in :func:`measure`;
    a target's ``energy`` turns its trials off. Each result's ``target`` is its target's name.

    Raises:
        ValueError: two targets share a name.
        MeasurementError: a call failed, or produced no usable timing.
        DeviceError: the device failed while reading energy.
    """
    if len({t.name for t in targets}) != len(targets):
        raise ValueError("interleaved targets need distinct names")
    if not targets:
        return []
    timer = BlockTimer(device, clock)
    rng = random.Random(settings.seed)
    per_call = [warm_up_for(t.run, timer, settings) for t in targets]
    calls = [
        interleaved_calls(p, t.min_time_s, settings) for p, t in zip(per_call, targets, strict=True)
    ]
    blocks: list[list[float]] = [[] for _ in targets]
    order = list(range(len(targets)))
    for _round in range(settings.blocks):
        rng.shuffle(order)
        for i in order:
            # One untimed call first: the last target left its own caches, branch predictors and
            # allocator state behind, which would otherwise weigh on blocks of few calls (a
            # model's) more than on blocks of many (a small op's).
            targets[i].run()
            blocks[i].append(timer.block_s(targets[i].run, calls[i]))
    results = []
    for i, target in enumerate(targets):
        eager = flagged(Timing("eager", calls[i], tuple(blocks[i])), settings)
        own = settings if target.energy else settings.model_copy(update={"energy": False})
        result = _complete(target.run, eager, timer, own, idle_power, rng, sleep, clock)
        results.append(
            dataclasses.replace(
                result,
                target=target.name,
                flags=(*result.flags, Flag.INTERLEAVED),
                provenance={
                    **result.provenance,
                    "interleaved": {"targets": len(targets), "rounds": settings.blocks},
                },
            )
        )
    return results


def _complete(
    run: Call,
    eager: Timing,
    timer: BlockTimer,
    settings: MeasureSettings,
    idle_power: float | None,
    rng: random.Random,
    sleep: Sleep,
    clock: Clock,
) -> MeasureResult:
    """Add the CUDA-graph timing (fast GPU ops), energy trials, flags and provenance."""
    device = timer.device
    per_call = eager.summary.median
    timings = [eager]
    flags = list(eager.flags)
    notes: dict[str, Any] = {}
    if timer.cuda and per_call < settings.cuda_graph_below_s:
        try:
            timings.append(time_cuda_graph(run, settings, per_call))
        except MeasurementError as exc:
            flags.append(Flag.GRAPH_UNAVAILABLE)
            notes[Flag.GRAPH_UNAVAILABLE.value] = str(exc)
    reason = energy_unavailable(device) if settings.energy else "energy measurement disabled"
    trials: list[EnergyTrial] = []
    if reason is None:
        trials = energy_trials(run, device, settings, per_call, sleep=sleep, rng=rng, clock=clock)
        if any(t.throttled for t in trials):
            flags.append(Flag.THROTTLED)
        if any(t.power_capped for t in trials):
            flags.append(Flag.POWER_CAPPED)
        result_disagreement = [
            d
            for t in trials
            if (d := t.window.disagreement) is not None and t.window.duration_s >= 1.0
        ]
        if any(abs(d) > settings.disagreement_limit for d in result_disagreement):
            flags.append(Flag.ENERGY_DISAGREEMENT)
        energies = [e for t in trials if (e := t.energy_per_call_j) is not None]
        if len(energies) > 1 and summarize(energies).iqr_ratio > settings.noisy_iqr_ratio:
            flags.append(Flag.ENERGY_NOISY)
    provenance = {
        **device.provenance(),
        "allocator": allocator_state(),
        "settings": settings.model_dump(),
        **notes,
    }
    return MeasureResult(
        tuple(timings),
        tuple(trials),
        reason,
        idle_power,
        tuple(flags),
        provenance,
        cache_mode=settings.cache_mode,
        threads=torch.get_num_threads(),
    )
