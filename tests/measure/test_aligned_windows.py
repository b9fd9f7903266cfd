"""Energy windows aligned to the counter's updates: short windows that do not err by a period.

The fake device's counter moves once per ``update_period_s`` (a read sees the last update), as
NVML's does every ~100 ms; with a manual clock every reading is known, so each window's answer
is: power × time per call.
"""

from __future__ import annotations

import pytest

from operator_db.devices.fake import FakeDevice
from operator_db.measure.energy import energy_trial
from operator_db.measure.settings import fast_settings
from tests.measure.test_engine import ManualClock, op

POWER_W = 100.0
CALL_S = 1e-3
EXACT_J = POWER_W * CALL_S


def _trial(aligned: bool, offset_s: float) -> float:
    """Energy per call of one window of 0.25 s (2.5 counter periods) opened ``offset_s`` into a
    counter period."""
    clock = ManualClock()
    device = FakeDevice(
        power_mw=POWER_W * 1000, update_period_s=0.1, clock=clock, sleep=clock.sleep
    )
    clock.sleep(offset_s)
    settings = fast_settings(
        energy_window_s=0.25,
        energy_window_min_calls=1,
        energy_window_min_periods=0,
        energy_windows="aligned" if aligned else "timed",
        energy_align_poll_s=0.001,
    )
    trial = energy_trial(
        op(clock),
        device,
        settings,
        index=0,
        per_call_s=CALL_S,
        gap_s=0.0,
        sleep=clock.sleep,
        clock=clock,
    )
    per_call = trial.energy_per_call_j
    assert per_call is not None
    if aligned:  # from one update to another: whole periods of the counter
        assert trial.window.duration_s == pytest.approx(0.3, abs=0.002)
    return per_call


@pytest.mark.parametrize("offset_s", [0.0, 0.013, 0.05, 0.087])
def test_an_aligned_window_is_exact_where_a_timed_one_errs_by_a_period(offset_s: float) -> None:
    timed = _trial(False, offset_s)
    aligned = _trial(True, offset_s)
    assert aligned == pytest.approx(EXACT_J, rel=0.01)
    # A 0.25 s window read on a 0.1 s counter: up to 40 % off, depending on where it falls.
    assert abs(timed / EXACT_J - 1) <= 0.41


def test_somewhere_a_timed_short_window_is_far_off() -> None:
    """The reason for aligning: over the offsets, the timed window's error reaches tens of %."""
    errors = [abs(_trial(False, o) / EXACT_J - 1) for o in (0.0, 0.013, 0.05, 0.087)]
    assert max(errors) > 0.1


def _stepped_trial(aligned: bool, warmup_s: float, lag_s: float) -> float:
    """The device idles at 50 W and draws 150 W from the first call on; its counter lags the
    power it integrates by ``lag_s``. Returns the active energy per call's error."""
    clock = ManualClock()
    device = FakeDevice(
        power_mw=50_000, update_period_s=0.1, counter_lag_s=lag_s, clock=clock, sleep=clock.sleep
    )
    calls = op(clock)

    def run() -> None:
        device.set_power_mw(150_000)
        calls()

    settings = fast_settings(
        energy_window_s=0.25,
        energy_window_min_calls=1,
        energy_window_min_periods=0,
        energy_warmup_s=warmup_s,
        energy_windows="aligned" if aligned else "timed",
    )
    trial = energy_trial(
        run, device, settings, index=0, per_call_s=CALL_S, gap_s=0.0, sleep=clock.sleep, clock=clock
    )
    assert trial.energy_per_call_j is not None
    return trial.energy_per_call_j / (150.0 * CALL_S) - 1


def test_a_lagging_counter_cancels_in_an_aligned_window_once_the_power_is_steady() -> None:
    """A counter that reports energy late: both edges of an aligned window lag alike, so at a
    steady power the lag cancels. Waiting for the first update runs calls already (here a whole
    period: the calls start on an update), which covers a 30 ms lag; a 150 ms lag reaches back
    to before the calls, and without a warm-up the window holds 50 ms of idle power at its
    first edge: 5 J of 45, 11 % low. A warm-up longer than the lag makes it exact again."""
    assert _stepped_trial(True, warmup_s=0.0, lag_s=0.03) == pytest.approx(0.0, abs=1e-9)
    cold = _stepped_trial(True, warmup_s=0.0, lag_s=0.15)
    assert cold == pytest.approx(-5.0 / 45.0, rel=0.05)
    assert _stepped_trial(True, warmup_s=0.3, lag_s=0.15) == pytest.approx(0.0, abs=1e-9)
    assert abs(_stepped_trial(False, warmup_s=0.3, lag_s=0.15)) > 0.05  # a timed short window


def test_a_counter_that_does_not_move_falls_back_to_a_timed_window_of_the_timed_length() -> None:
    """No update within the wait (a counter that is stuck): the window goes on as a timed one, as
    long as the timed method needs (max(0.25 s, 50 periods of 20 ms) = 1 s after the 1 s wait),
    and counts every call it held, those of the wait too."""
    clock = ManualClock()
    settings = fast_settings(
        energy_window_s=0.25,
        energy_window_min_calls=1,
        energy_window_min_periods=50,
        energy_windows="aligned",
    )
    stuck = FakeDevice(power_mw=100_000, update_period_s=0.5, clock=clock, sleep=clock.sleep)
    stuck.energy_mj = lambda: 7  # type: ignore[method-assign]
    stuck.set_counter_update_period_s(0.02)
    trial = energy_trial(
        op(clock),
        stuck,
        settings,
        index=0,
        per_call_s=CALL_S,
        gap_s=0.0,
        sleep=clock.sleep,
        clock=clock,
    )
    assert not trial.aligned
    assert trial.window.duration_s == pytest.approx(2.0, abs=0.01)
    assert trial.time_per_call_s == pytest.approx(CALL_S, rel=0.01)
    device = FakeDevice(power_mw=100_000, update_period_s=0.1, clock=clock, sleep=clock.sleep)
    aligned = energy_trial(
        op(clock),
        device,
        settings,
        index=0,
        per_call_s=CALL_S,
        gap_s=0.0,
        sleep=clock.sleep,
        clock=clock,
    )
    assert aligned.aligned and aligned.energy_per_call_j == pytest.approx(EXACT_J, rel=0.01)


def test_the_first_window_measures_the_power_period_before_the_warm_up() -> None:
    """The first window on a device polls its power reading to learn its period, sleeping (idle)
    meanwhile. Done between the warm-up and the window, a lagging counter reached back into that
    idle time: 20 % low in the simulation that found it. Done before the warm-up, exact."""
    clock = ManualClock()
    device = FakeDevice(
        power_mw=50_000, update_period_s=0.1, counter_lag_s=0.15, clock=clock, sleep=clock.sleep
    )
    calls = op(clock)

    def run() -> None:
        device.set_power_mw(150_000)
        calls()

    def idle(seconds: float) -> None:
        device.set_power_mw(50_000)
        clock.sleep(seconds)

    device._sleep = idle  # type: ignore[attr-defined]
    settings = fast_settings(
        energy_window_s=0.25,
        energy_window_min_calls=1,
        energy_warmup_s=0.3,
        energy_windows="aligned",
    )
    assert device.known_power_update_period_s() is None
    trial = energy_trial(
        run, device, settings, index=0, per_call_s=CALL_S, gap_s=0.0, sleep=idle, clock=clock
    )
    assert device.known_power_update_period_s() == pytest.approx(0.1)
    assert trial.aligned
    assert trial.energy_per_call_j == pytest.approx(150.0 * CALL_S, rel=1e-3)


def test_the_default_plan_is_aligned_and_short() -> None:
    """The defaults: aligned windows of the shortest plan the simulation allows; the timed
    method keeps METHODOLOGY §1's 5 s × 4."""
    from operator_db.config import ENERGY_PLANS, MeasureSettings

    plan = MeasureSettings().energy_plan()
    assert plan == ENERGY_PLANS["aligned"] and plan.method == "aligned"
    assert plan.window_s < 1 and plan.trials <= 3
    timed = MeasureSettings(energy_windows="timed").energy_plan()
    assert (timed.window_s, timed.trials, timed.warmup_s) == (5.0, 4, 0.5)
    assert MeasureSettings(energy_windows="timed", trials=2).energy_plan().trials == 2
