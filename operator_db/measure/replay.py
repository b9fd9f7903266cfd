"""A model's calls replayed in its own order: what each configuration costs inside the model.

Looped alone, an operator finds its weights, its input and its code hot in the caches, and (on a
multi-threaded CPU) its thread pool spinning on the same shape; inside a model, each call finds
the previous call's output in the caches and its own weights cold. A replay runs the recorded
calls of a spec (``Spec.calls``) in the model's order, as the model would, and times each call:

- **one instance per call position**: a module called at 12 places of the model has 12 copies
  of its weights in the replay, as in the model (the copies share the inputs they were built
  with); past ``max_copy_bytes`` of copied weights, positions share the first instance;
- **data flow**: a call whose first argument has the shape and dtype of the previous call's output
  gets that output instead of its own input, so it reads data the previous call just wrote (in
  ResNet-50 and MobileNetV2 nearly every call; in BERT 91 %: attention's second matmul operand and
  the residual adds read older outputs, their own inputs there);
- per pass, the time of every call (``time.perf_counter_ns`` around it: a CPU is synchronous).

Each configuration's in-context cost is its share of the median pass (by its mean time in a
pass), divided by its calls per pass: the configurations compose to the median pass, which a
model's median run compares with (until 2026-11-26: each configuration's own median, whose sum
fell 2–7 % below the median pass on a noisy host). On a 2-vCPU CPU at 2 threads the replay
(with each configuration's own median) moved the estimate of ResNet-50 b1 from −12.9 % of the
model (operators looped alone) to +0.6 %, MobileNetV2 b1's from −26.1 % to +1.1 % and
BERT-base b1's from −15.9 % to −1.0 % (``bench/bench_replay.py``; docs/measurement.md, "Replay
in the model's order").
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from operator_db.ops.build import BuiltOp
from operator_db.stats import Interval, median_interval

Clock = Callable[[], int]

DEVICE_PASSES = 32
"""Most passes whose calls a device timer marks (every other pass until then): their median
is each call's device time; the rest time the host's issue of each call."""

HOLD_CHUNK = 64
"""Calls issued behind one hold of the device's stream in a marked pass: few enough that the
chunk's launches and marks fit the device's launch queue while the hold keeps it busy."""
HOLD_MIN_S = 200e-6
"""The shortest hold of the device's stream before a chunk of a marked pass, s."""
MARK_COST_S = 5e-6
"""Host time allowed per mark when sizing a hold (a CUDA event record takes a few µs), s."""
HOLD_RETRIES = 6
"""Marked passes redone with a hold twice as long where the device caught up with the host."""


class CallTimer(Protocol):
    """Marks on an asynchronous device's stream between calls (CUDA events), read afterwards."""

    def mark(self) -> object:
        """Record a mark after the work issued so far; return it."""

    def spans_s(self, marks: Sequence[object]) -> list[float]:
        """Return the device time between consecutive marks, in s (waits for the last one)."""

    def synchronize(self) -> None:
        """Wait until the device has done the work issued so far."""

    def hold(self, seconds: float) -> object:
        """Keep the device's stream busy for about ``seconds`` (s); return a mark after it.

        The hold is work that touches no memory, so that the host issues what follows before
        the device runs it.
        """

    def reached(self, mark: object) -> bool:
        """Whether the device has already passed ``mark`` (without waiting)."""


class CudaCallTimer:
    """:class:`CallTimer` over CUDA events on a stream (the current one by default).

    Holds are ``torch.cuda._sleep`` spins, their cycles per second calibrated on first use.
    """

    def __init__(self, stream: torch.cuda.Stream | None = None) -> None:
        self._stream = stream
        self._cycles_per_s: float | None = None

    def _calibrate(self) -> float:
        """Return the spin kernel's clock cycles per second, from one timed spin."""
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]  # warm-up: the first launch loads the kernel
        start = self.mark()
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
        end = self.mark()
        seconds = self.spans_s([start, end])[0]
        return cycles / seconds if seconds > 0 else 1e9

    def hold(self, seconds: float) -> object:
        """Spin the stream for about ``seconds`` (s); return an event after the spin."""
        with torch.cuda.stream(self._stream or torch.cuda.current_stream()):
            if self._cycles_per_s is None:
                self._cycles_per_s = self._calibrate()
            torch.cuda._sleep(max(1, int(seconds * self._cycles_per_s)))  # type: ignore[no-untyped-call]
        return self.mark()

    def reached(self, mark: object) -> bool:
        """Whether the event has completed."""
        return isinstance(mark, torch.cuda.Event) and bool(mark.query())  # type: ignore[no-untyped-call]

    def mark(self) -> object:
        """Record a timing event on the stream."""
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record(self._stream)
        return event

    def spans_s(self, marks: Sequence[object]) -> list[float]:
        """Return the elapsed time between consecutive events, in s."""
        events = [m for m in marks if isinstance(m, torch.cuda.Event)]
        if events:
            events[-1].synchronize()
        return [a.elapsed_time(b) / 1000 for a, b in itertools.pairwise(events)]

    def synchronize(self) -> None:
        """Wait for the stream (the current one by default)."""
        (self._stream or torch.cuda.current_stream()).synchronize()


@dataclass(frozen=True)
class ReplayFigures:
    """What a replay measured: each configuration's in-context time, and how faithful it was."""

    per_call_s: dict[str, float]
    """Per configuration key: its time per call inside the replay, in s — its share (by its mean
    time in a pass) of the median pass (on an asynchronous device, device time between marks)."""
    host_per_call_s: dict[str, float] | None
    """With a device timer (a GPU): per key, the host's median time to issue one call in the
    replay, in s — the host stage in context; None on a synchronous device."""
    passes: int
    """Passes the figures are the median of."""
    calls: int
    """Calls per pass (the measurable calls of the model, in order)."""
    chained: float
    """Share of the calls fed the previous call's output (the rest read their own inputs)."""
    copies: int
    """Module instances made for call positions beyond each configuration's first."""
    caught_up: int = 0
    """Marked passes in which the device caught up with the host despite the longest hold (their
    spans may include waits for the host); 0 on a synchronous device."""
    per_call_interval_s: dict[str, tuple[float, float]] | None = None
    """Per configuration key: its per-call time's interval, s (the total's, relatively)."""
    total: Interval | None = None
    """Σ count × per-call time of every configuration: the median pass, s, with its exact
    interval over the passes (``operator_db.stats.median_interval``)."""


def _first_tensor(value: object) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, tuple | list) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


class Replay:
    """A model's measurable calls in order, each a built operator; one call of it is one pass.

    ``calls`` are (configuration key, built operator) in the model's order; a key may come back
    many times with the same built operator (each later position gets its own copy of the
    module's weights, see the module documentation). Inference only: a training spec's
    configurations are a forward and a backward each, which do not chain. ``max_copy_bytes=0``
    (positions share one instance) and ``chain=False`` (every call reads its own inputs) are
    the variants ``bench/bench_replay.py`` compares.

    On an asynchronous device (``device_timer``: a GPU) a call's time on the host is the time to
    issue it, not its cost: every other pass (up to ``DEVICE_PASSES``) marks the device's stream
    between calls instead, with the stream held so that the device runs the calls back to back
    (:meth:`_marked_pass`), and those marks give each call's device time in context; the other
    passes give each call's issue time in context (``ReplayFigures.host_per_call_s``).
    """

    def __init__(
        self,
        calls: Sequence[tuple[str, BuiltOp]],
        *,
        max_copy_bytes: int = 2 * 1024**3,
        chain: bool = True,
        device_timer: CallTimer | None = None,
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        self._clock = clock
        self._chain = chain
        self._timer = device_timer
        self._marked: list[list[list[object]]] = []
        self._keys = sorted({key for key, _ in calls})
        index = {key: i for i, key in enumerate(self._keys)}
        self._counts = [0] * len(self._keys)
        seen: set[str] = set()
        copied = 0
        self.copies = 0
        steps: list[tuple[int, BuiltOp]] = []
        for key, built in calls:
            self._counts[index[key]] += 1
            if key in seen and built.module is not None:
                size = sum(p.numel() * p.element_size() for p in built.module.parameters())
                if size > 0 and copied + size <= max_copy_bytes:
                    built = _twin(built)
                    copied += size
                    self.copies += 1
            seen.add(key)
            steps.append((index[key], built))
        self._steps = steps
        self._passes: list[list[int]] = []
        self._chained = 0
        self._hold_factor = 2.0
        self.caught_up = 0
        """Marked passes that counted although the device caught up with the host in them."""

    @property
    def calls(self) -> int:
        """Calls per pass."""
        return len(self._steps)

    def untimed(self) -> object:
        """Run one pass that records nothing (a warm-up; the call before a timed block).

        The pass right after another target finds the caches full of that target's data: its
        times are not the model's in its own context, as the model's untimed call before each
        of its blocks is not counted either. Counted, such passes (half of all, one before each
        block of one pass) put a ResNet-50 replay's median pass 1.4 % above that of the passes
        its blocks timed (one run, 2-vCPU VM), and the estimate as much above the model.
        """
        last: torch.Tensor | None = None
        out: Any = None
        for _, built in self._steps:
            out = built.fn(*self._arguments(built, last), **built.kwargs)
            last = _first_tensor(out)
        return out

    def __call__(self) -> object:
        """Run one pass: every call in order, each timed; return the last call's output."""
        timer = self._timer
        if (
            timer is not None
            and len(self._marked) < DEVICE_PASSES
            and len(self._passes) > len(self._marked)  # every other pass, from the second
        ):
            return self._marked_pass(timer)
        clock = self._clock
        spent = [0] * len(self._keys)
        if timer is not None:
            # An empty queue: a device-bound pass would otherwise block the host once the launch
            # queue fills, and that wait is not the host's issue time.
            timer.synchronize()
        last: torch.Tensor | None = None
        out: Any = None
        chained = 0
        for i, built in self._steps:
            args = self._arguments(built, last)
            chained += args is not built.args
            start = clock()
            out = built.fn(*args, **built.kwargs)
            spent[i] += clock() - start
            last = _first_tensor(out)
        self._passes.append(spent)
        self._chained = chained
        return out

    def _marked_pass(self, timer: CallTimer) -> object:
        """Run one pass with a device mark after each call, the device held behind the host.

        Marks alone would time the gaps where the device waits for the host to issue the next
        call (at batch 1 most of a pass): before each chunk of :data:`HOLD_CHUNK` calls the
        stream is held for longer than the host takes to issue the chunk (twice the last host
        pass's share, marks included), so the chunk's calls run back to back and each span is
        the call's device time. Where the device passed the chunk's first mark before the host
        had issued the chunk, the pass is redone with a hold twice as long
        (:data:`HOLD_RETRIES` times at most; then it counts as it is, and ``caught_up`` says
        so).
        """
        host_s = sum(self._passes[-1]) / 1e9 if self._passes else 0.0
        out: Any = None
        for _ in range(HOLD_RETRIES + 1):
            chunks: list[list[object]] = []
            caught_up = False
            last: torch.Tensor | None = None
            chained = 0
            for first in range(0, len(self._steps), HOLD_CHUNK):
                steps = self._steps[first : first + HOLD_CHUNK]
                share = host_s * len(steps) / max(1, len(self._steps))
                hold_s = max(HOLD_MIN_S, self._hold_factor * (share + MARK_COST_S * len(steps)))
                marks = [timer.hold(hold_s)]
                for _, built in steps:
                    args = self._arguments(built, last)
                    chained += args is not built.args
                    out = built.fn(*args, **built.kwargs)
                    marks.append(timer.mark())
                    last = _first_tensor(out)
                caught_up = caught_up or timer.reached(marks[0])
                chunks.append(marks)
            timer.synchronize()
            if not caught_up:
                break
            self._hold_factor *= 2
        self.caught_up += caught_up
        self._marked.append(chunks)
        self._chained = chained
        return out

    def _arguments(self, built: BuiltOp, last: torch.Tensor | None) -> tuple[Any, ...]:
        """Return a call's arguments: its own, or the previous output in place of the first."""
        args = built.args
        if (
            last is not None
            and self._chain
            and args
            and isinstance(args[0], torch.Tensor)
            and args[0].shape == last.shape
            and args[0].dtype == last.dtype
            and args[0].device == last.device
        ):
            return (last, *args[1:])
        return args

    def figures(self) -> ReplayFigures:
        """Return the per-configuration figures over the passes run so far.

        Raises:
            ValueError: no pass has run.
        """
        if not self._passes:
            raise ValueError("the replay has not run")
        host_passes = [[t / 1e9 for t in p] for p in self._passes]
        host = self._per_key(host_passes)
        if self._timer is None or not self._marked:
            return self._figures(self._shares(host_passes), None, len(self._passes), host_passes)
        device: list[list[float]] = []
        for chunks in self._marked:
            spent = [0.0] * len(self._keys)
            spans = [span for marks in chunks for span in self._timer.spans_s(marks)]
            for (i, _), span in zip(self._steps, spans, strict=True):
                spent[i] += span
            device.append(spent)
        return self._figures(self._shares(device), host, len(self._marked), device)

    def _per_key(self, passes: list[list[float]]) -> dict[str, float]:
        """Median over passes of each configuration's time in the pass, per call."""
        return {
            key: statistics.median(p[i] for p in passes) / self._counts[i]
            for i, key in enumerate(self._keys)
        }

    def _shares(self, passes: list[list[float]]) -> dict[str, float]:
        """Each configuration's per-call time as its share of the median pass, s.

        The median pass (its calls' times summed) is what the model's median run compares
        with: each pass, like each run of the model, holds whatever interrupted it. It is split
        by each configuration's mean time in a pass (means add up; medians of skewed times do
        not: their sum fell 2–7 % below the median pass on a noisy 2-vCPU host), so that the
        configurations' per-call times compose to the median pass exactly.
        """
        totals = [math.fsum(p) for p in passes]
        median = statistics.median(totals)
        means = [math.fsum(p[i] for p in passes) / len(passes) for i in range(len(self._keys))]
        whole = math.fsum(means)
        return {
            key: (median * means[i] / whole if whole > 0 else 0.0) / self._counts[i]
            for i, key in enumerate(self._keys)
        }

    def _figures(
        self,
        per_call: dict[str, float],
        host: dict[str, float] | None,
        passes: int,
        samples: list[list[float]],
    ) -> ReplayFigures:
        """Return the figures; ``samples``: the passes ``per_call`` shares the median of.

        The total's interval is the exact interval of the median pass; each configuration's
        is its per-call time moved by the total's relative interval.
        """
        total = median_interval([math.fsum(p) for p in samples])
        total = replace(total, method="median of passes, order statistics (exact)")
        lo = total.low / total.value if total.value > 0 else 1.0
        hi = total.high / total.value if total.value > 0 else 1.0
        intervals = {key: (v * lo, v * hi) for key, v in per_call.items()}
        return ReplayFigures(
            per_call,
            host,
            passes,
            self.calls,
            self._chained / self.calls if self.calls else 0.0,
            self.copies,
            self.caught_up,
            intervals,
            total,
        )


def _twin(built: BuiltOp) -> BuiltOp:
    """Return ``built`` with its own copy of the module (new weights), sharing its inputs."""
    assert built.module is not None
    module = copy.deepcopy(built.module)
    return replace(built, module=module, fn=module)
