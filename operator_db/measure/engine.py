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
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from operator_db.devices.base import Clock, Device, Sleep
from operator_db.devices.power import EnergyWindow, EnergyWindowResult
from operator_db.errors import DeviceError, MeasurementError
from operator_db.measure.allocator import allocator_state
from operator_db.measure.settings import MeasureSettings
from operator_db.measure.stats import Summary, summarize

Call = Callable[[], object]


@dataclass(frozen=True)
class Timing:
    """Per-call times of one timing method, from ``len(block_s)`` blocks."""

    method: Literal["eager", "graph"]
    calls_per_block: int
    block_s: tuple[float, ...]
    """Raw block durations in seconds."""
    flags: tuple[str, ...] = ()

    @property
    def per_call_s(self) -> tuple[float, ...]:
        """Per-call time of each block, in seconds."""
        return tuple(b / self.calls_per_block for b in self.block_s)

    @property
    def summary(self) -> Summary:
        """Statistics of the per-call times, in seconds."""
        return summarize(self.per_call_s)


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
    flags: tuple[str, ...]
    provenance: dict[str, Any] = field(default_factory=dict)

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
                    "flags": list(t.flags),
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


def _cuda_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class BlockTimer:
    """Times blocks of calls (s): CUDA events on a GPU, a host clock and synchronize elsewhere."""

    def __init__(self, device: Device, clock: Clock) -> None:
        self.device = device
        self.clock = clock
        self.cuda = device.torch_device().type == "cuda"

    def block_s(self, run: Call, calls: int) -> float:
        """Run ``calls`` calls back to back; return their duration in seconds."""
        if self.cuda:
            start = _cuda_event()
            end = _cuda_event()
            start.record()
            for _ in range(calls):
                run()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1000
        self.device.synchronize()
        t0 = self.clock()
        for _ in range(calls):
            run()
        self.device.synchronize()
        return (self.clock() - t0) / 1e9


def warm_up(run: Call, timer: BlockTimer, settings: MeasureSettings) -> float:
    """Run until ``warmup_s`` and ``warmup_min_calls`` are reached; return the last per-call s."""
    calls = 0
    spent = 0.0
    per_call = 0.0
    batch = 1
    while calls < settings.warmup_min_calls or spent < settings.warmup_s:
        elapsed = timer.block_s(run, batch)
        per_call = elapsed / batch
        spent += elapsed
        calls += batch
        batch = min(batch * 2, settings.max_calls_per_block)
    return per_call


def calls_for(duration_s: float, per_call_s: float, minimum: int, maximum: int) -> int:
    """Return how many calls of ``per_call_s`` seconds fill ``duration_s`` (within the bounds)."""
    if per_call_s <= 0:
        return maximum
    return max(minimum, min(maximum, math.ceil(duration_s / per_call_s)))


def time_blocks(
    run: Call,
    timer: BlockTimer,
    settings: MeasureSettings,
    per_call_s: float,
    min_time_s: float = 0.0,
) -> Timing:
    """Time ``blocks`` blocks (more, up to ``max_blocks``, to last ``min_time_s`` seconds).

    Re-time while IQR/median exceeds the unstable ratio (a few times); keep the steadiest attempt.
    """
    calls = calls_for(settings.block_min_s, per_call_s, 1, settings.max_calls_per_block)
    count = settings.blocks
    if min_time_s > 0 and per_call_s > 0:
        count = max(count, min(settings.max_blocks, math.ceil(min_time_s / (calls * per_call_s))))
    best: Timing | None = None
    for _attempt in range(settings.retries_when_unstable + 1):
        blocks = tuple(timer.block_s(run, calls) for _ in range(count))
        timing = Timing("eager", calls, blocks)
        if best is None or timing.summary.iqr_ratio < best.summary.iqr_ratio:
            best = timing
        if timing.summary.iqr_ratio <= settings.unstable_iqr_ratio:
            break
    assert best is not None
    return _flagged(best, settings)


def _flagged(timing: Timing, settings: MeasureSettings) -> Timing:
    """Return ``timing`` flagged 'unstable' or 'noisy' by the IQR/median of its per-call times."""
    ratio = timing.summary.iqr_ratio
    if ratio > settings.unstable_iqr_ratio:
        flags: tuple[str, ...] = ("unstable",)
    elif ratio > settings.noisy_iqr_ratio:
        flags = ("noisy",)
    else:
        flags = ()
    return dataclasses.replace(timing, flags=flags)


def time_cuda_graph(run: Call, settings: MeasureSettings, per_call_s: float) -> Timing:
    """Time ``graph_unroll`` calls captured as one CUDA graph (launch gaps removed).

    Raises:
        MeasurementError: the op cannot be captured (data-dependent shapes, host syncs, ...).
    """
    try:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(settings.graph_unroll):
                run()
    except Exception as exc:  # noqa: BLE001 - any capture failure means "no graph timing"
        raise MeasurementError(f"CUDA graph capture failed: {str(exc).splitlines()[0]}") from None
    replays = calls_for(settings.block_min_s, per_call_s * settings.graph_unroll, 1, 10_000)
    blocks = []
    for _ in range(settings.blocks):
        start = _cuda_event()
        end = _cuda_event()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        blocks.append(float(start.elapsed_time(end)) / 1000)
    return _flagged(Timing("graph", replays * settings.graph_unroll, tuple(blocks)), settings)


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
    per_call = warm_up(run, timer, settings)
    eager = time_blocks(run, timer, settings, per_call, min_time_s)
    return _complete(run, eager, timer, settings, idle_power, rng, sleep, clock)


def interleaved_calls(per_call_s: float, min_time_s: float, settings: MeasureSettings) -> int:
    """Return the calls per block of one target of an interleaved measurement.

    A block lasts at least ``block_min_s``; a target with a ``min_time_s`` (a whole model) gets
    longer blocks instead of more of them, so every target has ``blocks`` blocks, one per round.
    """
    calls = calls_for(settings.block_min_s, per_call_s, 1, settings.max_calls_per_block)
    if min_time_s > 0 and per_call_s > 0:
        calls = max(calls, math.ceil(round(min_time_s / (settings.blocks * per_call_s), 9)))
    return min(calls, settings.max_calls_per_block)


def measure_interleaved(
    runs: Sequence[Call],
    device: Device,
    settings: MeasureSettings,
    *,
    min_time_s: Sequence[float] | None = None,
    energy: Sequence[bool] | None = None,
    idle_power: float | None = None,
    clock: Clock = time.perf_counter_ns,
    sleep: Sleep = time.sleep,
) -> list[MeasureResult]:
    """Measure several calls with their timing blocks interleaved (one result per call, in order).

    Each target is warmed up; then ``blocks`` rounds each time one block of every target (after
    one untimed call of it), in a seeded random order per round. A slow drift of the machine's
    speed (a noisy neighbour, a clock change) then touches every target alike instead of whichever
    one was being measured at the time, so the operators of a model and the whole model are
    compared at the same moments.
    Unstable timings are flagged, not re-timed (re-timing one target alone would break the
    interleave). CUDA-graph timing and energy trials follow per target, as in :func:`measure`;
    ``energy`` turns the trials off for some targets (those timed only).

    Raises:
        MeasurementError: a call failed, or produced no usable timing.
        DeviceError: the device failed while reading energy.
    """
    if not runs:
        return []
    mins = list(min_time_s) if min_time_s is not None else [0.0] * len(runs)
    wants_energy = list(energy) if energy is not None else [True] * len(runs)
    if len(mins) != len(runs) or len(wants_energy) != len(runs):
        raise ValueError("min_time_s and energy need one value per call")
    timer = BlockTimer(device, clock)
    rng = random.Random(settings.seed)
    per_call = [warm_up(run, timer, settings) for run in runs]
    calls = [interleaved_calls(p, m, settings) for p, m in zip(per_call, mins, strict=True)]
    blocks: list[list[float]] = [[] for _ in runs]
    order = list(range(len(runs)))
    for _round in range(settings.blocks):
        rng.shuffle(order)
        for i in order:
            # One untimed call first: the last target left its own caches, branch predictors and
            # allocator state behind, which would otherwise weigh on blocks of few calls (a
            # model's) more than on blocks of many (a small op's).
            runs[i]()
            blocks[i].append(timer.block_s(runs[i], calls[i]))
    results = []
    for i, run in enumerate(runs):
        eager = _flagged(Timing("eager", calls[i], tuple(blocks[i])), settings)
        own = settings if wants_energy[i] else settings.model_copy(update={"energy": False})
        result = _complete(run, eager, timer, own, idle_power, rng, sleep, clock)
        results.append(
            dataclasses.replace(
                result,
                flags=(*result.flags, "interleaved"),
                provenance={
                    **result.provenance,
                    "interleaved": {"targets": len(runs), "rounds": settings.blocks},
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
    if timer.cuda and per_call < settings.cuda_graph_below_s:
        try:
            timings.append(time_cuda_graph(run, settings, per_call))
        except MeasurementError as exc:
            flags.append("graph_unavailable")
            flags.append(str(exc))
    reason = energy_unavailable(device) if settings.energy else "energy measurement disabled"
    trials: list[EnergyTrial] = []
    if reason is None:
        trials = energy_trials(run, device, settings, per_call, sleep=sleep, rng=rng, clock=clock)
        if any(t.throttled for t in trials):
            flags.append("throttled")
        if any(t.power_capped for t in trials):
            flags.append("power_capped")
        result_disagreement = [
            d
            for t in trials
            if (d := t.window.disagreement) is not None and t.window.duration_s >= 1.0
        ]
        if any(abs(d) > settings.disagreement_limit for d in result_disagreement):
            flags.append("energy_disagreement")
        energies = [e for t in trials if (e := t.energy_per_call_j) is not None]
        if len(energies) > 1 and summarize(energies).iqr_ratio > settings.noisy_iqr_ratio:
            flags.append("energy_noisy")
    provenance = {
        **device.provenance(),
        "allocator": allocator_state(),
        "settings": settings.model_dump(),
    }
    return MeasureResult(
        tuple(timings), tuple(trials), reason, idle_power, tuple(flags), provenance
    )
