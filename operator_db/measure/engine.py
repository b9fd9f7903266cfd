"""Time and energy of one callable on one device, by METHODOLOGY.md.

The callable is one call of an operator (or a whole model) on inputs allocated once and reused.
Time: warm-up, then blocks of back-to-back calls (CUDA events on a GPU, ``perf_counter_ns`` with a
synchronize elsewhere), per-call time = block time / calls; fast GPU ops are also timed as a CUDA
graph of unrolled calls. Energy: trials of windows (:mod:`operator_db.measure.energy`). Every
statistic is derived from the raw samples kept in the result.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from operator_db.devices.base import Clock, Device, Sleep
from operator_db.errors import MeasurementError
from operator_db.measure.allocator import allocator_state
from operator_db.measure.caches import cache_flush
from operator_db.measure.energy import (
    EnergyTrial,
    energy_trial,
    energy_trials,
    energy_unavailable,
)
from operator_db.measure.flags import Flag
from operator_db.measure.nvtx import nvtx_probe
from operator_db.measure.settings import MeasureSettings
from operator_db.measure.timing import (
    BlockTimer,
    Call,
    Timing,
    flagged,
    interleaved_calls,
    is_tight,
    time_blocks,
    time_cuda_graph,
    timing_of,
    warm_up_for,
)
from operator_db.stats import LEVEL, Interval, Summary, median_interval, summarize

GraphChoice = Literal["auto", "always", "never"]
"""When a target is timed as a CUDA graph too (see :class:`Target`)."""


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

    def energy_interval(self, level: float = LEVEL) -> Interval | None:
        """Return the median per-call energy over trials with its exact interval, J."""
        values = [v for t in self.trials if (v := t.energy_per_call_j) is not None]
        return median_interval(values, level) if values else None

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
    def window_time_per_call_s(self) -> float | None:
        """Median over trials of the per-call time inside the energy windows, in s."""
        values = [t.time_per_call_s for t in self.trials]
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
                    "host_block_s": list(t.host_block_s),
                    "flags": [str(f) for f in t.flags],
                }
                for t in self.timings
            ],
            "trials": [
                {
                    "index": t.index,
                    "gap_s": t.gap_s,
                    "calls": t.calls,
                    "time_per_call_s": t.time_per_call_s,
                    "clock_event_reasons": t.clock_event_reasons,
                    "telemetry_reads": t.telemetry_reads,
                    "violation_us": t.violation_us,
                    "window": t.window.as_dict(),
                    "telemetry_start": t.telemetry_start,
                    "telemetry_end": t.telemetry_end,
                }
                for t in self.trials
            ],
            "idle_power_w": self.idle_power_w,
        }


def operator_min_time_s(device: Device, settings: MeasureSettings) -> float:
    """Return how long an operator is timed at least, in s (see ``operator_min_time_s``).

    Where energy is measured, as long as the configuration's energy windows together (trials ×
    window, at most ``model_min_time_s``), so that its time is read in the regime (clocks, heat)
    its energy is: 0.5 s with aligned windows, 3 s with timed ones. Elsewhere only the blocks.
    """
    if settings.operator_min_time_s is not None:
        return settings.operator_min_time_s
    if _energy_reason(device, settings) is not None:
        return 0.0
    plan = settings.energy_plan()
    return min(settings.model_min_time_s, plan.trials * plan.window_s)


def measure(
    run: Call,
    device: Device,
    settings: MeasureSettings,
    *,
    idle_power: float | None = None,
    min_time_s: float = 0.0,
    nvtx_range: str | None = None,
    graph: GraphChoice = "auto",
    clock: Clock = time.perf_counter_ns,
    sleep: Sleep = time.sleep,
) -> MeasureResult:
    """Measure ``run`` (one call, reused inputs) on ``device``.

    ``min_time_s`` stretches the timing to at least that many seconds (whole models); ``graph``
    says when it is timed as a CUDA graph too (see :class:`Target`). With
    ``settings.nvtx``, one call after the warm-up runs inside the NVTX range ``nvtx_range``
    (:func:`~operator_db.measure.nvtx.nvtx_probe`), outside every timed block.

    Raises:
        MeasurementError: the call failed, or produced no usable timing.
        DeviceError: the device failed while reading energy.
    """
    timer = _timer(device, settings, clock)
    rng = random.Random(settings.seed)
    per_call = warm_up_for(run, timer, settings)
    if settings.nvtx and nvtx_range is not None:
        nvtx_probe(run, nvtx_range, device)
    eager = time_blocks(run, timer, settings, per_call, min_time_s)
    graph_timing = _graph_timing(run, eager, timer, settings, graph)
    reason = _energy_reason(device, settings)
    trials = []
    if reason is None:
        trials = energy_trials(
            run, device, settings, eager.summary.median, sleep=sleep, rng=rng, clock=clock
        )
    result = _result(eager, graph_timing, trials, reason, device, settings, idle_power)
    if settings.tight_ratio <= 0:
        return result
    tight = {
        "ratio": settings.tight_ratio,
        "blocks": len(eager.block_s),
        "half_width": round(eager.interval().half_width_ratio, 5),
    }
    return dataclasses.replace(result, provenance={**result.provenance, "until_tight": tight})


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
    nvtx_range: str | None = None
    """With ``settings.nvtx``: the NVTX range one call after its warm-up runs in (see
    :func:`measure`); None: no such call."""
    graph: GraphChoice = "auto"
    """CUDA-graph timing: ``auto`` where a call is fast enough, ``always`` (a whole model,
    captured once as one graph), ``never`` (a hollow run or a replay, whose Python and timers a
    graph would not replay)."""
    tight: bool = True
    """Measure it until tight after the rounds (``tight_ratio``); False: its rounds only (an
    operator a replay times in context), or those added too with ``joins_added_rounds``."""
    joins_added_rounds: bool = False
    """With ``tight`` False: in the added rounds too, unjudged (``generate()`` runs, llm/runs)."""
    untimed: Call | None = None
    """Called in place of ``run`` where a call is not timed (warm-up, the call before each block):
    a replay's pass that records nothing, so its figures hold only timed passes; None: ``run``."""

    @property
    def warm(self) -> Call:
        """The call run untimed: ``untimed`` where there is one, else ``run``."""
        return self.untimed or self.run


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
    compared at the same moments. With ``settings.nvtx``, each target with an ``nvtx_range`` runs
    one call in that range after the warm-ups, before the rounds.
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
    timer = _timer(device, settings, clock)
    rng = random.Random(settings.seed)
    per_call = [warm_up_for(t.warm, timer, settings) for t in targets]
    for target in targets:
        if settings.nvtx and target.nvtx_range is not None:
            nvtx_probe(target.run, target.nvtx_range, device)
    calls = [
        interleaved_calls(p, t.min_time_s, settings) for p, t in zip(per_call, targets, strict=True)
    ]
    blocks: list[list[tuple[float, float | None]]] = [[] for _ in targets]
    order = list(range(len(targets)))
    for _round in range(settings.blocks):
        rng.shuffle(order)
        for i in order:
            # One untimed call first: the last target left its own caches, branch predictors and
            # allocator state behind, which would weigh on blocks of few calls (a model's) most.
            targets[i].warm()
            blocks[i].append(timer.block(targets[i].run, calls[i]))
    extra, spent = _until_tight(targets, calls, blocks, timer, settings, rng, clock)
    eagers = []
    for i in range(len(targets)):
        timing = timing_of("eager", calls[i], blocks[i])
        if targets[i].tight and not is_tight(timing, settings):
            timing = dataclasses.replace(timing, flags=(Flag.LOOSE,))
        eagers.append(flagged(timing, settings))
    graphs = [
        _graph_timing(t.run, e, timer, settings, t.graph)
        for t, e in zip(targets, eagers, strict=True)
    ]
    trials = _interleaved_trials(targets, eagers, device, settings, rng, sleep, clock)
    results = []
    for i, target in enumerate(targets):
        own = settings if target.energy else settings.model_copy(update={"energy": False})
        result = _result(
            eagers[i], graphs[i], trials[i], _energy_reason(device, own), device, own, idle_power
        )
        results.append(
            dataclasses.replace(
                result,
                target=target.name,
                flags=(*result.flags, Flag.INTERLEAVED),
                provenance={
                    **result.provenance,
                    "interleaved": {"targets": len(targets), "rounds": settings.blocks},
                    "until_tight": {
                        "ratio": settings.tight_ratio,
                        "rounds": extra,
                        "seconds": round(spent, 3),
                        "half_width": round(eagers[i].interval().half_width_ratio, 5),
                    },
                },
            )
        )
    return results


def _until_tight(
    targets: Sequence[Target],
    calls: Sequence[int],
    blocks: list[list[tuple[float, float | None]]],
    timer: BlockTimer,
    settings: MeasureSettings,
    rng: random.Random,
    clock: Clock,
) -> tuple[int, float]:
    """Run more rounds of the targets measured until tight, all of them, while one is loose.

    Until every target's 95 % interval is within ``tight_ratio`` of its median (those with
    ``tight``), ``tight_budget_s`` has passed or ``max_blocks`` rounds have run. Every ``tight``
    target runs in every added round, the tight ones too: the figures an estimate compares
    must be sampled at the same moments (extending a loose ResNet-50 alone, on a VM whose speed
    changed in stretches of seconds, put the estimate 15.8 % below it). Returns the rounds
    added and their seconds.
    """
    extra, spent = 0, 0.0
    if settings.tight_ratio <= 0:
        return extra, spent
    measured = [i for i, t in enumerate(targets) if t.tight]
    joining = [i for i, t in enumerate(targets) if t.tight or t.joins_added_rounds]
    while spent < settings.tight_budget_s and settings.blocks + extra < settings.max_blocks:
        if all(is_tight(timing_of("eager", calls[i], blocks[i]), settings) for i in measured):
            break
        order = list(joining)
        rng.shuffle(order)
        start = clock()
        for i in order:
            targets[i].warm()  # untimed first, as in the rounds before
            blocks[i].append(timer.block(targets[i].run, calls[i]))
        spent += (clock() - start) / 1e9
        extra += 1
    return extra, spent


def _interleaved_trials(
    targets: Sequence[Target],
    eagers: Sequence[Timing],
    device: Device,
    settings: MeasureSettings,
    rng: random.Random,
    sleep: Sleep,
    clock: Clock,
) -> list[list[EnergyTrial]]:
    """Run every target's energy trials, trial i of each before trial i + 1 of any.

    The order is new and random each time, so that no target always comes last, when the device
    is hottest (the model, before).
    """
    trials: list[list[EnergyTrial]] = [[] for _ in targets]
    if _energy_reason(device, settings) is not None:
        return trials
    wanted = [i for i, t in enumerate(targets) if t.energy]
    for index in range(settings.energy_plan().trials):
        rng.shuffle(wanted)
        for i in wanted:
            trials[i].append(
                energy_trial(
                    targets[i].run,
                    device,
                    settings,
                    index=index,
                    per_call_s=eagers[i].summary.median,
                    gap_s=rng.uniform(0.0, settings.max_gap_s),
                    sleep=sleep,
                    clock=clock,
                )
            )
    return trials


def _timer(device: Device, settings: MeasureSettings, clock: Clock) -> BlockTimer:
    """Return the block timer of ``settings``' cache mode: cold flushes before every call."""
    cold = settings.cache_mode == "cold"
    return BlockTimer(
        device, clock, flush=cache_flush(device, settings.cold_flush_bytes) if cold else None
    )


def _energy_reason(device: Device, settings: MeasureSettings) -> str | None:
    """Return why no energy is measured (disabled, cold mode, no source), or None."""
    if not settings.energy:
        return "energy measurement disabled"
    if settings.cache_mode == "cold":
        return "energy not measured in cold mode: the cache flushes between calls would count"
    return energy_unavailable(device)


def _graph_timing(
    run: Call,
    eager: Timing,
    timer: BlockTimer,
    settings: MeasureSettings,
    graph: GraphChoice = "auto",
) -> Timing | str | None:
    """Time a GPU call as a CUDA graph: its timing, the capture error's message, or None.

    ``auto``: a call faster than ``cuda_graph_below_s``, ``graph_unroll`` calls to a graph;
    ``always``: any call, one to a graph (a whole model); ``never``: none.
    """
    per_call = eager.summary.median
    if graph == "never" or not timer.cuda or timer.flush is not None:
        return None  # a graph replays its calls back to back: no flush between them
    if graph == "auto" and per_call >= settings.cuda_graph_below_s:
        return None
    try:
        unroll = 1 if graph == "always" else None
        return time_cuda_graph(run, settings, per_call, timer.stream, unroll=unroll)
    except MeasurementError as exc:
        return str(exc)


def _result(
    eager: Timing,
    graph: Timing | str | None,
    trials: Sequence[EnergyTrial],
    reason: str | None,
    device: Device,
    settings: MeasureSettings,
    idle_power: float | None,
) -> MeasureResult:
    """Build a result: timings, trials, the flags they raise, and the provenance."""
    timings = [eager]
    flags = list(eager.flags)
    notes: dict[str, Any] = {}
    if isinstance(graph, Timing):
        timings.append(graph)
    elif graph is not None:
        flags.append(Flag.GRAPH_UNAVAILABLE)
        notes[Flag.GRAPH_UNAVAILABLE.value] = graph
    if trials:
        if any(t.throttled for t in trials):
            flags.append(Flag.THROTTLED)
        if any(t.power_capped for t in trials):
            flags.append(Flag.POWER_CAPPED)
        long_windows = [
            d
            for t in trials
            if (d := t.window.disagreement) is not None and t.window.duration_s >= 1.0
        ]
        if any(abs(d) > settings.disagreement_limit for d in long_windows):
            flags.append(Flag.ENERGY_DISAGREEMENT)
        energies = [e for t in trials if (e := t.energy_per_call_j) is not None]
        if len(energies) > 1 and summarize(energies).iqr_ratio > settings.noisy_iqr_ratio:
            flags.append(Flag.ENERGY_NOISY)
        in_window = summarize([t.time_per_call_s for t in trials]).median
        eager_s = eager.summary.median
        if eager_s > 0 and abs(in_window / eager_s - 1) > settings.window_time_tolerance:
            flags.append(Flag.WINDOW_TIME_DIFFERS)
            notes[Flag.WINDOW_TIME_DIFFERS.value] = {
                "eager_median_s": eager_s,
                "window_time_per_call_s": in_window,
            }
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
