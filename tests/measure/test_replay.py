"""A replay of a model's call order: each call timed in place, fed the previous output."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
import torch

from operator_db.measure.replay import (
    DEVICE_PASSES,
    HOLD_CHUNK,
    HOLD_RETRIES,
    MARK_COST_S,
    Replay,
)
from operator_db.ops import build_op
from operator_db.specs import OperatorSpec
from tests.helpers import linear_op, relu_op


def test_each_call_is_timed_and_figures_are_per_call_medians() -> None:
    """With a clock that ticks 1 µs per reading, every call takes 1 µs whatever it is."""
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    ticks = itertools.count(0, 1000)
    replay = Replay(
        [("lin", linear), ("relu", relu), ("lin", linear), ("relu", relu), ("relu", relu)],
        clock=lambda: next(ticks),
    )
    with torch.no_grad():
        for _ in range(3):
            replay()
    figures = replay.figures()
    assert figures.per_call_s == pytest.approx({"lin": 1e-6, "relu": 1e-6})
    assert figures.host_per_call_s is None  # a synchronous device: a call's time is its cost
    assert (figures.passes, figures.calls) == (3, 5)
    # Every call after the first reads the previous output (same shape); the second Linear is
    # a copy with its own weights (a ReLU has none to copy).
    assert figures.chained == pytest.approx(4 / 5)
    assert figures.copies == 1


def test_the_configurations_compose_to_the_median_pass() -> None:
    """An interruption in one call of a pass counts as it does in a run of the model."""
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    # Per pass (lin, relu) in µs: lin is interrupted in 2 of 5 passes, relu in 2 others.
    spans = [(10, 5), (30, 5), (10, 5), (10, 25), (30, 25)]
    ticks = iter(
        itertools.accumulate(t * 1000 for pass_ in spans for call in pass_ for t in (0, call))
    )
    replay = Replay([("lin", linear), ("relu", relu)], clock=lambda: next(ticks))
    with torch.no_grad():
        for _ in spans:
            replay()
    figures = replay.figures()
    # Pass totals 15, 35, 15, 35, 55 µs: median 35 µs, split by mean times 18 and 13 µs.
    assert figures.per_call_s["lin"] == pytest.approx(35e-6 * 18 / 31)
    assert figures.per_call_s["relu"] == pytest.approx(35e-6 * 13 / 31)
    assert sum(figures.per_call_s.values()) == pytest.approx(35e-6)  # its medians: 10 + 5
    assert figures.total is not None and figures.total.value == pytest.approx(35e-6)
    assert (figures.total.low, figures.total.high) == pytest.approx((15e-6, 55e-6))  # n = 5
    low, high = figures.per_call_interval_s["lin"]  # type: ignore[index]
    assert low / figures.per_call_s["lin"] == pytest.approx(15 / 35)


def test_a_call_reads_the_previous_output_and_each_position_has_its_own_weights() -> None:
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    replay = Replay([("lin", linear), ("lin", linear)])
    with torch.no_grad():
        out = replay()
    first, second = replay._steps[0][1], replay._steps[1][1]
    assert first.module is linear.module and second.module is not linear.module
    assert second.inputs is linear.inputs  # the copy shares the inputs it was built with
    assert first.module is not None and second.module is not None
    assert first.module.weight.data_ptr() != second.module.weight.data_ptr()
    with torch.no_grad():
        expected = second.module(first.module(linear.inputs[0]))
    torch.testing.assert_close(out, expected)


def test_copies_stop_at_the_budget_and_positions_then_share() -> None:
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    size = sum(p.numel() * p.element_size() for p in linear.module.parameters())  # type: ignore[union-attr]
    replay = Replay([("lin", linear)] * 4, max_copy_bytes=2 * size)
    assert replay.copies == 2
    assert replay._steps[3][1] is linear


def test_a_call_of_another_shape_reads_its_own_input() -> None:
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 4, batch=2)))
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    replay = Replay([("lin", linear), ("relu", relu)])
    with torch.no_grad():
        out = replay()
    torch.testing.assert_close(out, torch.relu(relu.inputs[0]))
    assert replay.figures().chained == 0.0


def test_figures_before_any_pass_are_an_error() -> None:
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    with pytest.raises(ValueError, match="has not run"):
        Replay([("relu", relu)]).figures()


class _ScriptedDevice:
    """A fake asynchronous device: each call's device time is scripted, in call order; the
    device catches up with the host (``reached``) while a hold is shorter than ``catch_up_s``."""

    def __init__(self, per_call_s: list[float], catch_up_s: float = 0.0) -> None:
        self.per_call_s = per_call_s
        self.catch_up_s = catch_up_s
        self.marks = 0
        self.syncs = 0
        self.holds: list[float] = []
        self._cursor = 0

    def mark(self) -> object:
        self.marks += 1
        return self.marks

    def hold(self, seconds: float) -> object:
        self.holds.append(seconds)
        return ("hold", seconds)

    def reached(self, mark: object) -> bool:
        assert isinstance(mark, tuple) and mark[0] == "hold"
        return bool(mark[1] < self.catch_up_s)

    def spans_s(self, marks: Sequence[object]) -> list[float]:
        spans = len(marks) - 1  # one mark before the chunk's first call, one after each
        out = [self.per_call_s[(self._cursor + k) % len(self.per_call_s)] for k in range(spans)]
        self._cursor += spans
        return out

    def synchronize(self) -> None:
        self.syncs += 1


def test_on_an_asynchronous_device_passes_alternate_host_issue_and_device_marks() -> None:
    """A GPU's call returns once issued: every other pass marks the device between calls (its
    time in context), the others time the host's issue of each call (the host stage in context).
    Known costs in, the same costs out."""
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    device = _ScriptedDevice([2e-3, 0.5e-3, 2e-3, 0.5e-3, 0.5e-3])
    ticks = itertools.count(0, 3000)  # 3 µs to issue any call
    replay = Replay(
        [("lin", linear), ("relu", relu), ("lin", linear), ("relu", relu), ("relu", relu)],
        device_timer=device,
        clock=lambda: next(ticks),
    )
    with torch.no_grad():
        for _ in range(2 * DEVICE_PASSES + 6):
            replay()
    figures = replay.figures()
    assert figures.per_call_s == pytest.approx({"lin": 2e-3, "relu": 0.5e-3})
    assert figures.host_per_call_s == pytest.approx({"lin": 3e-6, "relu": 3e-6})
    assert figures.passes == DEVICE_PASSES  # then every pass times the host
    assert device.marks == DEVICE_PASSES * 5  # after each call; the hold gives the first
    assert len(device.holds) == DEVICE_PASSES  # 5 calls: one chunk a pass
    assert device.syncs == 2 * DEVICE_PASSES + 6  # before each host pass, after each marked one
    assert figures.chained == pytest.approx(4 / 5)  # marked passes chain as the others do


def test_a_marked_pass_holds_the_device_longer_until_it_no_longer_catches_up() -> None:
    """At batch 1 a GPU runs a call faster than the host issues the next: marks alone would time
    the host. Each chunk of a marked pass is issued behind a hold of the stream, twice the
    host's issue time; where the device still caught up, the pass is redone with a hold twice
    as long, and figures only count passes the device did not catch up in."""
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    calls = [("relu", relu)] * HOLD_CHUNK  # one chunk
    device = _ScriptedDevice([1e-6], catch_up_s=3e-3)
    ticks = itertools.count(0, 10_000)  # 10 µs to issue any call
    replay = Replay(calls, device_timer=device, clock=lambda: next(ticks))
    with torch.no_grad():
        replay()  # host pass: 64 calls x 10 µs
        replay()  # marked
    first_chunk = 2 * (HOLD_CHUNK * 10e-6 + HOLD_CHUNK * MARK_COST_S)
    assert device.holds[0] == pytest.approx(first_chunk)  # 1.92 ms < 3 ms: caught up
    assert device.holds[1:] == pytest.approx([2 * first_chunk])  # redone, twice as long
    figures = replay.figures()
    assert figures.per_call_s == pytest.approx({"relu": 1e-6})
    assert figures.passes == 1
    assert figures.caught_up == 0


def test_a_device_that_always_catches_up_is_said() -> None:
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    device = _ScriptedDevice([1e-6], catch_up_s=float("inf"))
    replay = Replay([("relu", relu)], device_timer=device, clock=itertools.count(0, 1000).__next__)
    with torch.no_grad():
        replay()
        replay()
    assert len(device.holds) == HOLD_RETRIES + 1
    assert replay.figures().caught_up == 1


def test_an_untimed_pass_runs_the_calls_and_records_nothing() -> None:
    """The pass before a timed block (after another target) is not one of the replay's passes."""
    linear = build_op(OperatorSpec.model_validate(linear_op(8, 8, batch=2)))
    relu = build_op(OperatorSpec.model_validate(relu_op([2, 8])))
    seen: list[str] = []
    linear.module.register_forward_hook(lambda *_: seen.append("lin"))  # type: ignore[union-attr]
    replay = Replay([("lin", linear), ("relu", relu)])
    with torch.no_grad():
        out = replay.untimed()
        with pytest.raises(ValueError):
            replay.figures()  # nothing recorded yet
        replay()
        replay.untimed()
    assert isinstance(out, torch.Tensor) and out.shape == (2, 8)
    assert seen == ["lin", "lin", "lin"] and replay.figures().passes == 1
