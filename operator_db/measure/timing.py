"""Timing blocks of back-to-back calls: warm-up, block sizes, eager and CUDA-graph timings.

Per METHODOLOGY §3: CUDA events around a block on a GPU, a host clock around a synchronised
block elsewhere; per-call time = block time / calls; IQR / median flags a noisy or unstable
timing. The engine (:mod:`operator_db.measure.engine`) and the peak microbenchmarks
(:mod:`operator_db.measure.peaks`) both time through here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from operator_db.devices.base import Clock, Device
from operator_db.errors import DeviceContextLostError, MeasurementError
from operator_db.measure.flags import Flag
from operator_db.measure.generator import repair_generator
from operator_db.measure.settings import MeasureSettings
from operator_db.ops.build import first_line
from operator_db.stats import LEVEL, Interval, Summary, median_interval, summarize

Call = Callable[[], object]
"""One call of what is measured, on inputs allocated once and reused."""


@dataclass(frozen=True)
class Timing:
    """Per-call times of one timing method, from ``len(block_s)`` blocks."""

    method: Literal["eager", "graph"]
    calls_per_block: int
    block_s: tuple[float, ...]
    """Raw block durations in seconds."""
    flags: tuple[Flag, ...] = ()
    host_block_s: tuple[float, ...] = ()
    """GPU: the host's time to issue each block's calls (enqueue), in s; empty elsewhere, where
    the host waits for every call and its time is the block's."""

    @property
    def per_call_s(self) -> tuple[float, ...]:
        """Per-call time of each block, in seconds."""
        return tuple(b / self.calls_per_block for b in self.block_s)

    @property
    def host_per_call_s(self) -> float | None:
        """Median over blocks of the host's per-call issue time, in s (None where not recorded)."""
        if not self.host_block_s:
            return None
        return summarize([b / self.calls_per_block for b in self.host_block_s]).median

    @property
    def summary(self) -> Summary:
        """Statistics of the per-call times, in seconds."""
        return summarize(self.per_call_s)

    def interval(self, level: float = LEVEL) -> Interval:
        """Return the median per-call time with its exact confidence interval over blocks, s."""
        return median_interval(self.per_call_s, level)


def _cuda_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class BlockTimer:
    """Times blocks of calls (s): CUDA events on a GPU, a host clock and synchronize elsewhere.

    On a GPU the events are recorded on the device's current stream, named explicitly: the one
    the calls are launched on (the device is made current while it is open for measuring).
    """

    def __init__(self, device: Device, clock: Clock, *, flush: Call | None = None) -> None:
        """Time on ``device`` by ``clock`` (ns); ``flush`` runs untimed before every call (cold)."""
        self.device = device
        self.clock = clock
        self.flush = flush
        torch_device = device.torch_device()
        self.cuda = torch_device.type == "cuda"
        self.stream: Any = torch.cuda.current_stream(torch_device) if self.cuda else None

    def block(self, run: Call, calls: int) -> tuple[float, float | None]:
        """Run ``calls`` calls back to back; return (device time, host issue time) in s.

        The host time is the GPU's only: there the calls are enqueued asynchronously and the
        host's loop ends before the device's work (unless the launch queue fills up); elsewhere
        it is None. With a ``flush`` (cold mode) each call is timed on its own, after its flush.
        """
        if self.flush is not None:
            return self._cold_block(run, calls, self.flush)
        if self.cuda:
            start = _cuda_event()
            end = _cuda_event()
            start.record(self.stream)
            t0 = self.clock()
            for _ in range(calls):
                run()
            host_s = (self.clock() - t0) / 1e9
            end.record(self.stream)
            end.synchronize()
            return float(start.elapsed_time(end)) / 1000, host_s
        self.device.synchronize()
        t0 = self.clock()
        for _ in range(calls):
            run()
        self.device.synchronize()
        return (self.clock() - t0) / 1e9, None

    def _cold_block(self, run: Call, calls: int, flush: Call) -> tuple[float, float | None]:
        """Flush, then time one call, ``calls`` times; return the calls' summed times (s)."""
        if self.cuda:
            spans = []
            host_ns = 0
            for _ in range(calls):
                flush()
                start, end = _cuda_event(), _cuda_event()
                start.record(self.stream)
                t0 = self.clock()
                run()
                host_ns += self.clock() - t0
                end.record(self.stream)
                spans.append((start, end))
            spans[-1][1].synchronize()
            return sum(float(s.elapsed_time(e)) for s, e in spans) / 1000, host_ns / 1e9
        total_ns = 0
        for _ in range(calls):
            flush()
            self.device.synchronize()
            t0 = self.clock()
            run()
            self.device.synchronize()
            total_ns += self.clock() - t0
        return total_ns / 1e9, None

    def block_s(self, run: Call, calls: int) -> float:
        """Run ``calls`` calls back to back; return their (device) duration in seconds."""
        return self.block(run, calls)[0]


_SIZING_TRIES = 5
"""Blocks a warm-up may run to size a timed block (see :func:`warm_up`)."""


def warm_up(
    run: Call,
    timer: BlockTimer,
    *,
    min_s: float,
    min_calls: int,
    max_calls_per_block: int,
    min_block_s: float = 0.0,
) -> float:
    """Warm ``run`` up: blocks of doubling size, then one sized like a timed block.

    The doubling blocks run until ``min_s`` seconds and ``min_calls`` (at least 2) calls have
    passed and the last block lasted ``min_block_s`` (or held ``max_calls_per_block`` calls).
    Returns a per-call time, s: with ``min_block_s``, that of a block sized from the warm-up to
    last ``min_block_s`` (re-sized while it runs less than half of that), else the last block's.
    It never comes from the first, cold call alone: lazy initialisation can make it 1000x slower
    and size every timed block wrong.

    Raises:
        MeasurementError: a block took no measurable time (a stopped clock).
    """
    calls = 0
    spent = 0.0
    per_call = 0.0
    batch = 1
    elapsed = 0.0
    while (
        calls < max(min_calls, 2)
        or spent < min_s
        or (elapsed < min_block_s and batch < max_calls_per_block)
    ):
        batch = min(batch * 2, max_calls_per_block) if calls else 1
        elapsed = timer.block_s(run, batch)
        if elapsed <= 0:
            raise MeasurementError(f"{batch} calls took no measurable time; is the clock moving?")
        per_call = elapsed / batch
        spent += elapsed
        calls += batch
    # A cold start can make the first blocks slow: the estimate is checked on a block sized like
    # a timed one, and re-sized (a few times at most) while such a block runs far too short.
    for _ in range(_SIZING_TRIES if min_block_s > 0 else 0):
        sized = calls_for(min_block_s, per_call, 1, max_calls_per_block)
        elapsed = timer.block_s(run, sized)
        if elapsed <= 0:
            break
        per_call = elapsed / sized
        if elapsed >= min_block_s / 2 or sized >= max_calls_per_block:
            break
    return per_call


def warm_up_for(run: Call, timer: BlockTimer, settings: MeasureSettings) -> float:
    """Warm ``run`` up for ``warmup_s`` and ``warmup_min_calls`` (see :func:`warm_up`)."""
    return warm_up(
        run,
        timer,
        min_s=settings.warmup_s,
        min_calls=settings.warmup_min_calls,
        max_calls_per_block=settings.max_calls_per_block,
        min_block_s=settings.block_min_s,
    )


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

    The blocks needed for ``min_time_s`` are first estimated from ``per_call_s``, then added one by
    one until their time has passed on the clock: a warm-up's per-call time (a cold first call)
    may overstate it. Re-time while IQR/median exceeds the unstable ratio (a few times); keep the
    steadiest attempt.
    """
    calls = calls_for(settings.block_min_s, per_call_s, 1, settings.max_calls_per_block)
    count = settings.blocks
    if min_time_s > 0 and per_call_s > 0:
        count = max(count, min(settings.max_blocks, math.ceil(min_time_s / (calls * per_call_s))))
    best: Timing | None = None
    for _attempt in range(settings.retries_when_unstable + 1):
        timed = [timer.block(run, calls) for _ in range(count)]
        while sum(t for t, _ in timed) < min_time_s and len(timed) < settings.max_blocks:
            timed.append(timer.block(run, calls))
        timing = timing_of("eager", calls, timed)
        if best is None or timing.summary.iqr_ratio < best.summary.iqr_ratio:
            best = timing
        if timing.summary.iqr_ratio <= settings.unstable_iqr_ratio:
            break
    assert best is not None
    return flagged(until_tight(run, timer, settings, best), settings)


def is_tight(timing: Timing, settings: MeasureSettings) -> bool:
    """Whether the timing's 95 % interval is within ``tight_ratio`` of its median (or off)."""
    return settings.tight_ratio <= 0 or timing.interval().half_width_ratio <= settings.tight_ratio


def until_tight(run: Call, timer: BlockTimer, settings: MeasureSettings, timing: Timing) -> Timing:
    """Add blocks to ``timing`` until it is tight, ``tight_budget_s`` or ``max_blocks``.

    Loose at the end: flagged :attr:`Flag.LOOSE` (kept through :func:`flagged`).
    """
    if is_tight(timing, settings):
        return timing
    timed = list(
        zip(timing.block_s, timing.host_block_s or [None] * len(timing.block_s), strict=True)
    )
    spent = 0.0
    while spent < settings.tight_budget_s and len(timed) < settings.max_blocks:
        for _ in range(max(1, len(timed) // 10)):  # check every tenth more: a median costs n log n
            block = timer.block(run, timing.calls_per_block)
            timed.append(block)
            spent += block[0]
        timing = timing_of("eager", timing.calls_per_block, timed)
        if is_tight(timing, settings):
            return timing
    return dataclasses.replace(timing, flags=(Flag.LOOSE,))


def timing_of(
    method: Literal["eager", "graph"], calls: int, timed: list[tuple[float, float | None]]
) -> Timing:
    """Return the timing of blocks timed by :meth:`BlockTimer.block` (device, host seconds)."""
    hosts = tuple(h for _, h in timed if h is not None)
    return Timing(
        method,
        calls,
        tuple(t for t, _ in timed),
        host_block_s=hosts if len(hosts) == len(timed) else (),
    )


def flagged(timing: Timing, settings: MeasureSettings) -> Timing:
    """Return ``timing`` flagged unstable or noisy by the IQR/median of its per-call times."""
    ratio = timing.summary.iqr_ratio
    if ratio > settings.unstable_iqr_ratio:
        flags: tuple[Flag, ...] = (Flag.UNSTABLE,)
    elif ratio > settings.noisy_iqr_ratio:
        flags = (Flag.NOISY,)
    else:
        flags = ()
    loose = (Flag.LOOSE,) if Flag.LOOSE in timing.flags else ()
    return dataclasses.replace(timing, flags=flags + loose)


GRAPH_MIN_TORCH = (2, 4)
"""The oldest torch graph timing runs on."""
CLEAN_FAILURE_TORCH = (2, 13)
"""Before it, a failed capture could leave the caching allocator believing a capture was still
under way, and the graph's private pool reserved, for the rest of the process
(pytorch/pytorch#180395, #190348). There the first failed capture turns graph timing off for the
rest of the process (eager timing goes on; the next process tries again), and where the stream
is still capturing or the device cannot allocate afterwards, the context counts as lost: the
worker stops for a restart (``DeviceContextLostError``)."""

_graphs_off: str | None = None
"""Why graph timing is off for the rest of this process (a failed capture on an old torch)."""


def _torch_version(text: str) -> tuple[int, int] | None:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def graph_timing_unavailable(version: str | None = None) -> str | None:
    """Say why CUDA-graph timing is off with this torch (``version``: torch's), or None.

    With no ``version``, also where an earlier capture of this process failed on a torch older
    than :data:`CLEAN_FAILURE_TORCH`.
    """
    text = version if version is not None else torch.__version__
    found = _torch_version(text)
    if found is None:
        return f"CUDA-graph timing off: cannot read the torch version {text!r}"
    if found < GRAPH_MIN_TORCH:
        wanted = ".".join(map(str, GRAPH_MIN_TORCH))
        return f"CUDA-graph timing off: torch {text} is older than {wanted}"
    return _graphs_off if version is None else None


def _after_failed_capture(message: str) -> None:
    """Turn graph timing off for this process after a failed capture on an old torch.

    On a torch before :data:`CLEAN_FAILURE_TORCH` only; the context counts as lost where the
    allocator kept the failed capture's state.

    Raises:
        DeviceContextLostError: the stream is still capturing, or a small allocation fails.
    """
    global _graphs_off
    found = _torch_version(torch.__version__)
    if found is None or found >= CLEAN_FAILURE_TORCH:
        return
    _graphs_off = (
        f"CUDA-graph timing off for this process after a failed capture ({message}) on torch "
        f"{torch.__version__}, older than "
        f"{'.'.join(map(str, CLEAN_FAILURE_TORCH))}; the next process tries again"
    )
    try:
        capturing = torch.cuda.is_current_stream_capturing()
        if not capturing:
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
    except RuntimeError as exc:
        raise DeviceContextLostError(
            f"after a failed CUDA graph capture the device cannot allocate: {first_line(exc)}"
        ) from exc
    if capturing:
        raise DeviceContextLostError(
            "a failed CUDA graph capture left the stream capturing (torch "
            f"{torch.__version__}): the process must restart"
        )
    repair_generator()


def time_cuda_graph(
    run: Call,
    settings: MeasureSettings,
    per_call_s: float,
    stream: Any = None,
    *,
    unroll: int | None = None,
) -> Timing:
    """Time ``unroll`` (default ``graph_unroll``) calls captured as one CUDA graph.

    The graph is captured on a side stream after three warm-up calls there, replayed once
    untimed and synchronised, then replayed in ``blocks`` blocks timed by events on ``stream``
    (default: the current stream).

    Raises:
        MeasurementError: the op cannot be captured (data-dependent shapes, host syncs, ...), or
            graph timing is off (:func:`graph_timing_unavailable`).
        DeviceContextLostError: a failed capture left the allocator capturing (torch < 2.13).
    """
    unavailable = graph_timing_unavailable()
    if unavailable is not None:
        raise MeasurementError(unavailable)
    stream = stream if stream is not None else torch.cuda.current_stream()
    calls = unroll if unroll is not None else settings.graph_unroll
    try:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        stream.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                run()
        graph.replay()  # once untimed: the first replay uploads the graph
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any capture failure means "no graph timing"
        message = f"CUDA graph capture failed: {first_line(exc)}"
        _after_failed_capture(message)
        raise MeasurementError(message) from None
    replays = calls_for(settings.block_min_s, per_call_s * calls, 1, 10_000)
    blocks = []
    for _ in range(settings.blocks):
        start = _cuda_event()
        end = _cuda_event()
        start.record(stream)
        for _ in range(replays):
            graph.replay()
        end.record(stream)
        end.synchronize()
        blocks.append(float(start.elapsed_time(end)) / 1000)
    return flagged(Timing("graph", replays * calls, tuple(blocks)), settings)


def interleaved_calls(per_call_s: float, min_time_s: float, settings: MeasureSettings) -> int:
    """Return the calls per block of one target of an interleaved measurement.

    A block lasts at least ``block_min_s``; a target with a ``min_time_s`` (a whole model) gets
    longer blocks instead of more of them, so every target has ``blocks`` blocks, one per round.
    """
    calls = calls_for(settings.block_min_s, per_call_s, 1, settings.max_calls_per_block)
    if min_time_s > 0 and per_call_s > 0:
        calls = max(calls, math.ceil(round(min_time_s / (settings.blocks * per_call_s), 9)))
    return min(calls, settings.max_calls_per_block)
