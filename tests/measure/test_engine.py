"""The measurement method on the fake device with a manual clock: every figure is known exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db.devices.fake import FakeDevice
from operator_db.measure import engine
from operator_db.measure.caches import cache_flush, last_level_cache_bytes
from operator_db.measure.energy import idle_power_w
from operator_db.measure.engine import Target, measure, measure_interleaved
from operator_db.measure.settings import fast_settings
from operator_db.stats import quantile, summarize


class ManualClock:
    """A clock in ns that only moves when told: each op call and each sleep advance it."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.ns += round(seconds * 1e9)


def op(clock: ManualClock, durations_s: list[float] | None = None):  # type: ignore[no-untyped-def]
    """An 'operator' whose calls take 1 ms each (or the given durations, cycled)."""
    calls = {"n": 0}

    def run() -> None:
        d = durations_s[calls["n"] % len(durations_s)] if durations_s else 1e-3
        calls["n"] += 1
        clock.sleep(d)

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_summary_statistics() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0] + [2.5] * 15
    s = summarize(values)
    assert s.n == 20
    assert s.median == 2.5
    assert s.iqr == pytest.approx(quantile(sorted(values), 0.75) - quantile(sorted(values), 0.25))
    assert s.mean == pytest.approx((1 + 2 + 3 + 4 + 2.5 * 15) / 19)  # 100 is beyond 3σ
    assert s.minimum == 1.0 and s.maximum == 100.0
    assert summarize([2.0]).cv == 0.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.25) == 1.75
    with pytest.raises(ValueError):
        summarize([])


def test_exact_time_and_energy_per_call() -> None:
    clock = ManualClock()
    device = FakeDevice(power_mw=100_000, update_period_s=0.001, clock=clock, sleep=clock.sleep)
    settings = fast_settings(
        block_min_s=0.01,
        blocks=7,
        trials=3,
        energy_window_s=0.5,
        energy_window_min_calls=32,
        max_gap_s=0.1,
        seed=7,
    )
    run = op(clock)
    result = measure(run, device, settings, idle_power=40.0, clock=clock, sleep=clock.sleep)
    eager = result.eager
    assert eager.calls_per_block == 10
    assert len(eager.block_s) == 7
    assert eager.summary.median == pytest.approx(1e-3)
    assert eager.summary.iqr == pytest.approx(0.0, abs=1e-12)
    assert result.flags == ()
    assert len(result.trials) == 3
    # 32 calls, then chunks of 50 (a tenth of the window) until 0.5 s have passed.
    assert [t.calls for t in result.trials] == [532, 532, 532]
    assert all(0.0 <= t.gap_s <= 0.1 for t in result.trials)
    assert len({t.gap_s for t in result.trials}) == 3
    energy = result.energy_per_call
    assert energy is not None
    assert energy.median == pytest.approx(0.1, rel=0.01)  # 100 W × 1 ms
    assert result.dynamic_energy_per_call_j == pytest.approx(0.06, rel=0.02)  # (100 − 40) W × 1 ms
    assert result.energy_source == "counter"
    assert result.power_mean_w == pytest.approx(100.0, rel=0.01)
    raw = result.raw()
    assert len(raw["timings"][0]["block_s"]) == 7
    assert len(raw["trials"]) == 3 and raw["trials"][0]["window"]["samples"]
    assert result.provenance["settings"]["trials"] == 3


def test_trial_gaps_follow_the_seed() -> None:
    def gaps(seed: int) -> list[float]:
        clock = ManualClock()
        device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
        r = measure(
            op(clock),
            device,
            fast_settings(max_gap_s=0.1, seed=seed),
            clock=clock,
            sleep=clock.sleep,
        )
        return [t.gap_s for t in r.trials]

    assert gaps(1) == gaps(1)
    assert gaps(1) != gaps(2)


def test_windows_hold_at_least_the_minimum_calls() -> None:
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    settings = fast_settings(energy_window_s=0.001, energy_window_min_calls=32)
    result = measure(op(clock), device, settings, clock=clock, sleep=clock.sleep)
    assert [t.calls for t in result.trials] == [32, 32]


def test_noisy_and_unstable_flags() -> None:
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    # Blocks of one call alternating 1.0 and 1.15 ms: IQR/median ≈ 0.14 → noisy, not unstable.
    noisy = measure(
        op(clock, [1e-3, 1.15e-3]),
        device,
        fast_settings(block_min_s=1e-4, blocks=8, energy=False),
        clock=clock,
        sleep=clock.sleep,
    )
    assert noisy.eager.calls_per_block == 1
    assert noisy.flags == ("noisy",)
    unstable = measure(
        op(clock, [1e-3, 2e-3]),
        device,
        fast_settings(block_min_s=1e-4, blocks=8, energy=False, retries_when_unstable=2),
        clock=clock,
        sleep=clock.sleep,
    )
    assert unstable.flags == ("unstable",)


def test_throttled_trials_are_flagged() -> None:
    clock = ManualClock()
    device = FakeDevice(
        update_period_s=0.001, clock_event_reasons=0x40 | 0x4, clock=clock, sleep=clock.sleep
    )
    result = measure(op(clock), device, fast_settings(), clock=clock, sleep=clock.sleep)
    assert result.flags == ("throttled", "power_capped")
    assert all(t.throttled and t.power_capped for t in result.trials)


def test_no_energy_source_says_why() -> None:
    clock = ManualClock()
    device = FakeDevice(has_energy_counter=False, has_power=False, clock=clock, sleep=clock.sleep)
    result = measure(op(clock), device, fast_settings(), clock=clock, sleep=clock.sleep)
    assert result.trials == ()
    assert result.energy_per_call is None
    assert result.energy_unavailable == (
        "energy unavailable: fake device configured without an energy counter"
    )
    disabled = measure(
        op(clock), device, fast_settings(energy=False), clock=clock, sleep=clock.sleep
    )
    assert disabled.energy_unavailable == "energy measurement disabled"


def test_power_integration_only_fallback() -> None:
    """Pre-Volta: no counter, power samples integrated with the trapezoid rule."""
    clock = ManualClock()
    device = FakeDevice(
        power_mw=50_000,
        has_energy_counter=False,
        update_period_s=0.001,
        clock=clock,
        sleep=clock.sleep,
    )
    settings = fast_settings(energy_window_s=0.2)
    result = measure(op(clock), device, settings, clock=clock, sleep=clock.sleep)
    assert result.energy_source == "power_integration"
    energy = result.energy_per_call
    assert energy is not None
    assert energy.median == pytest.approx(0.05, rel=0.05)  # 50 W × 1 ms


def test_idle_power() -> None:
    clock = ManualClock()
    device = FakeDevice(power_mw=42_000, update_period_s=0.001, clock=clock, sleep=clock.sleep)
    assert idle_power_w(device, 1.0, sleep=clock.sleep) == pytest.approx(42.0, rel=0.01)
    cpu_like = FakeDevice(has_energy_counter=False, has_power=False)
    assert idle_power_w(cpu_like, 1.0, sleep=clock.sleep) is None


def test_min_time_stretches_the_blocks() -> None:
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    settings = fast_settings(block_min_s=0.01, blocks=5, energy=False, max_blocks=300)
    result = measure(op(clock), device, settings, min_time_s=1.0, clock=clock, sleep=clock.sleep)
    assert result.eager.calls_per_block == 10
    assert len(result.eager.block_s) == 100  # 1 s of 10 ms blocks
    capped = measure(
        op(clock),
        device,
        settings.model_copy(update={"max_blocks": 30}),
        min_time_s=1.0,
        clock=clock,
        sleep=clock.sleep,
    )
    assert len(capped.eager.block_s) == 30


def test_interleaved_rounds_see_the_same_drift() -> None:
    """A machine that halves its speed part-way: separate timings disagree, interleaved agree."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    start = clock.ns
    order: list[str] = []

    def target(name: str, base_s: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            order.append(name)
            slow = clock.ns - start > 0.15e9  # twice as slow after 150 ms
            clock.sleep(base_s * (2 if slow else 1))

        return run

    settings = fast_settings(block_min_s=0.004, blocks=20, energy=False, seed=3)
    op_a, op_b, model = target("a", 1e-3), target("b", 2e-3), target("model", 3e-3)
    separate = [
        measure(r, device, settings, clock=clock, sleep=clock.sleep) for r in (op_a, op_b, model)
    ]
    sum_separate = sum(r.eager.summary.median for r in separate[:2])
    assert separate[2].eager.summary.median / sum_separate == pytest.approx(2.0)  # drift, not ops

    start = clock.ns
    order.clear()
    targets = [Target("a", op_a), Target("b", op_b), Target("model", model, min_time_s=0.9)]
    results = measure_interleaved(targets, device, settings, clock=clock, sleep=clock.sleep)
    assert [r.target for r in results] == ["a", "b", "model"]  # each result names its target
    medians = [r.eager.summary.median for r in results]
    assert medians[2] == pytest.approx(medians[0] + medians[1])  # the same moments: exact
    assert [len(r.eager.block_s) for r in results] == [20, 20, 20]  # one block per round
    assert [r.eager.calls_per_block for r in results] == [4, 2, 15]  # the model: 0.9 s / 20 / 3 ms
    assert all("interleaved" in r.flags for r in results)
    assert results[0].provenance["interleaved"] == {"targets": 3, "rounds": 20}
    # Each round takes the targets in a new seeded order.
    firsts = {seq[0] for seq in _rounds(order, [4, 2, 15])}
    assert len(firsts) > 1


def _rounds(order: list[str], calls: list[int]) -> list[list[str]]:
    """Split the timed part of a call log into rounds: one untimed call and a block per target."""
    names = ["a", "b", "model"]
    per = {name: n + 1 for name, n in zip(names, calls, strict=True)}
    blocks: list[str] = []
    i = len(order) - 20 * sum(per.values())  # warm-up calls come first
    while i < len(order):
        assert order[i : i + per[order[i]]] == [order[i]] * per[order[i]]
        blocks.append(order[i])
        i += per[order[i]]
    rounds = [blocks[k : k + 3] for k in range(0, len(blocks), 3)]
    assert len(rounds) == 20 and all(sorted(r) == names for r in rounds)
    return rounds


def test_interleaved_edge_cases() -> None:
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    settings = fast_settings(energy=False)
    assert measure_interleaved([], device, settings) == []
    with pytest.raises(ValueError, match="need distinct names"):
        measure_interleaved([Target("x", op(clock)), Target("x", op(clock))], device, settings)
    # With energy on, each target still gets its own trials after the rounds.
    with_energy = measure_interleaved(
        [Target("x", op(clock)), Target("y", op(clock))],
        device,
        fast_settings(trials=2),
        clock=clock,
        sleep=clock.sleep,
    )
    assert [len(r.trials) for r in with_energy] == [2, 2]


def test_energy_windows_open_after_a_warm_up() -> None:
    """The power's rise time stays out of the window: calls run for energy_warmup_s first."""

    def calls_made(warmup_s: float) -> int:
        clock = ManualClock()
        device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
        run = op(clock)
        settings = fast_settings(energy_window_s=0.5, trials=3, energy_warmup_s=warmup_s)
        measure(run, device, settings, clock=clock, sleep=clock.sleep)
        return int(run.calls["n"])  # type: ignore[attr-defined]

    # Chunks of 50 calls (a tenth of the 0.5 s window): one chunk of warm-up before each window.
    assert calls_made(0.05) - calls_made(0.0) == 3 * 50


def test_energy_windows_span_enough_counter_updates() -> None:
    """A window lasts at least energy_window_min_periods update periods of the counter."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.02, clock=clock, sleep=clock.sleep)
    device.set_counter_update_period_s(0.02)
    settings = fast_settings(energy_window_s=0.1, energy_window_min_periods=50, trials=1)
    result = measure(op(clock), device, settings, clock=clock, sleep=clock.sleep)
    assert result.trials[0].window.duration_s == pytest.approx(1.0, rel=0.02)  # 50 × 20 ms
    shorter = measure(
        op(clock),
        device,
        settings.model_copy(update={"energy_window_min_periods": 0}),
        clock=clock,
        sleep=clock.sleep,
    )
    assert shorter.trials[0].window.duration_s == pytest.approx(0.1, rel=0.02)


def test_in_window_time_is_kept_and_a_different_regime_is_flagged() -> None:
    """Calls slow down by 10 % after the timing (heat, a power cap): the windows see it."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    # 4 warm-up calls (1, 2, then one sized like a block) and 5 blocks of one call: then slower.
    run = op(clock, [1e-3] * 9 + [1.1e-3] * 100_000)
    result = measure(
        run, device, fast_settings(energy_window_s=0.1), clock=clock, sleep=clock.sleep
    )
    assert result.eager.summary.median == pytest.approx(1e-3)
    assert result.window_time_per_call_s == pytest.approx(1.1e-3, rel=0.01)
    assert result.raw()["trials"][0]["time_per_call_s"] == pytest.approx(1.1e-3, rel=0.01)
    assert "window_time_differs" in result.flags
    assert result.provenance["window_time_differs"]["eager_median_s"] == pytest.approx(1e-3)
    steady = measure(
        op(clock), device, fast_settings(energy_window_s=0.1), clock=clock, sleep=clock.sleep
    )
    assert "window_time_differs" not in steady.flags


def test_clock_events_inside_the_window_are_seen() -> None:
    """A thermal slowdown that starts and ends inside a window flags the trial."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    calls = {"n": 0}

    def run() -> None:
        calls["n"] += 1
        device.clock_event_reasons = 0x40 if 30 <= calls["n"] < 45 else 0
        clock.sleep(1e-3)

    result = measure(
        run, device, fast_settings(energy_window_s=0.1, trials=2), clock=clock, sleep=clock.sleep
    )
    first, second = result.trials
    assert first.telemetry_start["clock_event_reasons"] == 0
    assert first.telemetry_end["clock_event_reasons"] == 0
    assert first.throttled and first.clock_event_reasons == 0x40 and first.telemetry_reads > 3
    assert not second.throttled and second.clock_event_reasons == 0
    assert result.flags == ("throttled",)


def test_interleaved_energy_trials_take_turns() -> None:
    """Trial i of every target runs before trial i + 1 of any, in a new order each time."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    targets = [Target(name, op(clock)) for name in ("a", "b", "model")]
    results = measure_interleaved(
        targets, device, fast_settings(trials=4, seed=5), clock=clock, sleep=clock.sleep
    )
    starts = sorted((t.window.start_us, t.index, r.target) for r in results for t in r.trials)
    indices = [index for _, index, _ in starts]
    assert indices == sorted(indices)  # every trial 0, then every trial 1, ...
    last_of_each = [starts[3 * i + 2][2] for i in range(4)]
    assert len(set(last_of_each)) > 1  # the same target is not always the last, hottest one


def test_min_time_is_reached_on_the_clock_not_on_the_warm_up_estimate() -> None:
    """A cold first call (10 ms, then 1 ms) must not cut a 0.1 s timing to 10 ms."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    run = op(clock, [10e-3] + [1e-3] * 100_000)
    settings = fast_settings(energy=False, max_blocks=1000)
    result = measure(run, device, settings, min_time_s=0.1, clock=clock, sleep=clock.sleep)
    assert sum(result.eager.block_s) == pytest.approx(0.1)
    assert len(result.eager.block_s) == 100


def test_violation_time_over_the_window_is_kept_and_flags_the_trial() -> None:
    """The device's violation counters are read around each window; thermal time flags it."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    device.violation_us = {"thermal_violation_us": 0, "power_violation_us": 5}

    def run() -> None:
        device.violation_us["thermal_violation_us"] += 100  # 0.1 ms held back per 1 ms call
        clock.sleep(1e-3)

    result = measure(
        run, device, fast_settings(energy_window_s=0.1, trials=1), clock=clock, sleep=clock.sleep
    )
    [trial] = result.trials
    assert trial.violation_us["power"] == 0 and trial.violation_us["thermal"] >= 100 * 100
    assert trial.throttled and not trial.power_capped
    assert result.raw()["trials"][0]["violation_us"] == trial.violation_us
    assert result.flags == ("throttled",)


def test_cold_mode_flushes_before_every_call_outside_the_timed_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    flushes = {"n": 0}

    def fake_flush(dev: object, nbytes: int | None) -> object:
        def flush() -> None:
            flushes["n"] += 1
            clock.sleep(5e-3)  # a flush costs 5 ms: none of it may count

        return flush

    monkeypatch.setattr(engine, "cache_flush", fake_flush)
    run = op(clock)
    result = measure(run, device, fast_settings(cache_mode="cold"), clock=clock, sleep=clock.sleep)
    assert result.eager.summary.median == pytest.approx(1e-3)
    assert flushes["n"] == run.calls["n"]  # type: ignore[attr-defined]
    assert result.cache_mode == "cold" and result.trials == ()
    assert result.energy_unavailable is not None and "cold mode" in result.energy_unavailable
    warm = measure(op(clock), device, fast_settings(energy=False), clock=clock, sleep=clock.sleep)
    assert warm.cache_mode == "warm"


def test_cache_flush_sizes(tmp_path: Path) -> None:
    root = tmp_path
    for index, size in (("index0", "32K"), ("index2", "1024K"), ("index3", "32768K")):
        (root / index).mkdir()
        (root / index / "size").write_text(size + "\n")
    assert last_level_cache_bytes(str(root)) == 32 << 20
    assert last_level_cache_bytes(str(root / "missing")) is None
    flush = cache_flush(FakeDevice(), 1 << 16)
    assert int(flush().sum()) == 0  # type: ignore[attr-defined]


def test_untimed_calls_take_the_target_s_untimed_call() -> None:
    """Warm-ups and the call before each block run ``untimed``; only the blocks run ``run``."""
    clock = ManualClock()
    device = FakeDevice(update_period_s=0.001, clock=clock, sleep=clock.sleep)
    calls = {"run": 0, "untimed": 0}

    def call(which: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            calls[which] += 1
            clock.sleep(1e-3)

        return run

    settings = fast_settings(block_min_s=0.002, blocks=5, energy=False, warmup_min_calls=3)
    target = Target("replay", call("run"), untimed=call("untimed"))
    [result] = measure_interleaved([target], device, settings, clock=clock, sleep=clock.sleep)
    timed = result.eager.calls_per_block * len(result.eager.block_s)
    assert calls["run"] == timed == 2 * 5  # the blocks only
    assert calls["untimed"] >= 3 + 5  # the warm-up, then one before each block
