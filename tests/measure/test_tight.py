"""Measuring until tight: more blocks until the median's interval is within tight_ratio."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from operator_db.measure.engine import Target, _until_tight
from operator_db.measure.flags import Flag
from operator_db.measure.settings import fast_settings
from operator_db.measure.timing import Timing, is_tight, timing_of, until_tight


class Blocks:
    """A timer whose blocks take the times of ``seconds`` in turn (one call each)."""

    def __init__(self, seconds: Iterator[float]) -> None:
        self.seconds = seconds
        self.count = 0

    def block(self, run: object, calls: int) -> tuple[float, None]:
        self.count += 1
        return next(self.seconds) * calls, None


def _start(values: list[float]) -> Timing:
    return timing_of("eager", 1, [(v, None) for v in values])


def test_a_tight_timing_gets_no_more_blocks() -> None:
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=10.0)
    timer = Blocks(itertools.repeat(1e-3))
    timing = until_tight(lambda: None, timer, settings, _start([1e-3] * 20))  # type: ignore[arg-type]
    assert timer.count == 0 and Flag.LOOSE not in timing.flags


def test_noise_is_measured_until_tight() -> None:
    rng = random.Random(1)
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=10.0, max_blocks=5000)
    noisy = [1e-3 * rng.uniform(0.9, 1.1) for _ in range(20)]
    assert not is_tight(_start(noisy), settings)  # ±10 % over 20 blocks: about ±5 %
    timer = Blocks(iter(lambda: 1e-3 * rng.uniform(0.9, 1.1), None))
    timing = until_tight(lambda: None, timer, settings, _start(noisy))  # type: ignore[arg-type]
    assert Flag.LOOSE not in timing.flags and is_tight(timing, settings)
    assert timing.interval().half_width_ratio <= 0.01 and timer.count > 100


def test_when_the_budget_runs_out_the_timing_is_loose() -> None:
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=0.05)
    halves = itertools.cycle([1e-3, 1.3e-3])  # two states: never tight
    timer = Blocks(halves)
    start = _start([1e-3, 1.3e-3] * 10)
    timing = until_tight(lambda: None, timer, settings, start)  # type: ignore[arg-type]
    assert Flag.LOOSE in timing.flags
    assert 20 < len(timing.block_s) <= 20 + 0.05 / 1e-3 + 10  # stopped by the budget


def test_interleaved_rounds_extend_only_the_targets_measured_until_tight() -> None:
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=0.2, max_blocks=60)
    rng = random.Random(2)
    timer = Blocks(iter(lambda: 1e-3 * rng.choice([1.0, 1.3]), None))
    targets = [Target("model", lambda: None), Target("op", lambda: None, tight=False)]
    blocks: list[list[tuple[float, float | None]]] = [
        [(1e-3, None), (1.3e-3, None)] * 10,
        [(1e-3, None), (1.3e-3, None)] * 10,
    ]
    extra, spent = _until_tight(
        targets,
        [1, 1],
        blocks,
        timer,  # type: ignore[arg-type]
        settings,
        random.Random(0),
        itertools.count(0, 1_000_000).__next__,  # 1 ms a reading
    )
    assert extra > 0 and len(blocks[0]) == 20 + extra and len(blocks[1]) == 20
    assert spent > 0 and (extra + settings.blocks >= settings.max_blocks or spent >= 0.2)


def test_added_rounds_keep_every_tight_target_in_step() -> None:
    """A target already tight keeps running beside a loose one: both see the same moments."""
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=0.2, max_blocks=60)
    rng = random.Random(3)
    timer = Blocks(iter(lambda: 1e-3 * rng.choice([1.0, 1.3]), None))
    targets = [Target("model", lambda: None), Target("replay", lambda: None)]
    blocks: list[list[tuple[float, float | None]]] = [
        [(1e-3, None), (1.3e-3, None)] * 10,  # loose: two states
        [(1e-3, None)] * 20,  # tight already
    ]
    extra, _ = _until_tight(
        targets,
        [1, 1],
        blocks,
        timer,  # type: ignore[arg-type]
        settings,
        random.Random(0),
        itertools.count(0, 1_000_000).__next__,
    )
    assert extra > 0 and len(blocks[0]) == len(blocks[1]) == 20 + extra


def test_a_target_that_joins_added_rounds_runs_in_them_unjudged() -> None:
    """``joins_added_rounds``: in every added round, yet its own loose timing adds none."""
    settings = fast_settings(tight_ratio=0.01, tight_budget_s=0.2, max_blocks=60)
    rng = random.Random(2)
    timer = Blocks(iter(lambda: 1e-3 * rng.choice([1.0, 1.3]), None))
    calls: list[str] = []
    targets = [
        Target("model", lambda: calls.append("model")),
        Target("beside", lambda: calls.append("beside"), tight=False, joins_added_rounds=True),
        Target("op", lambda: calls.append("op"), tight=False),
    ]
    loose = [(1e-3, None), (1.3e-3, None)] * 10
    blocks: list[list[tuple[float, float | None]]] = [list(loose), list(loose), list(loose)]
    extra, _ = _until_tight(
        targets,
        [1, 1, 1],
        blocks,
        timer,  # type: ignore[arg-type]
        settings,
        random.Random(0),
        itertools.count(0, 1_000_000).__next__,
    )
    assert extra > 0
    assert len(blocks[0]) == len(blocks[1]) == 20 + extra and len(blocks[2]) == 20
    # (this timer does not call; each added round calls every joining target once, untimed)
    assert calls.count("beside") == calls.count("model") == extra and "op" not in calls

    tight_model = [(1e-3, None)] * 20  # the model tight: a loose joiner adds no round
    blocks = [list(tight_model), list(loose), list(loose)]
    extra, _ = _until_tight(
        targets,
        [1, 1, 1],
        blocks,
        timer,  # type: ignore[arg-type]
        settings,
        random.Random(0),
        itertools.count(0, 1_000_000).__next__,
    )
    assert extra == 0
