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
        energy_aligned=aligned,
        energy_align_poll_s=0.001,
    )
    trial = energy_trial(
        op(clock), device, settings, index=0, chunk=25, gap_s=0.0, sleep=clock.sleep, clock=clock
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
        energy_aligned=aligned,
    )
    trial = energy_trial(
        run, device, settings, index=0, chunk=25, gap_s=0.0, sleep=clock.sleep, clock=clock
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
