"""Trapezoid integration, the power sampler thread, energy windows, update-period measurement."""

from __future__ import annotations

import time

import pytest

from operator_db.devices import (
    EnergyWindow,
    EnergyWindowResult,
    FakeDevice,
    PowerSample,
    PowerSampler,
    decode_clock_event_reasons,
    integrate_power_mj,
    measure_update_period_s,
    sampling_interval_s,
)
from operator_db.errors import DeviceError
from tests.devices.clock import ManualClock

S = 1_000_000  # µs per second

SAMPLES = [PowerSample(0, 100_000.0), PowerSample(1 * S, 200_000.0), PowerSample(3 * S, 200_000.0)]


# --- integration ---------------------------------------------------------------------------------


def test_trapezoid_over_the_samples() -> None:
    # 1 s ramping 100 -> 200 W (150 J) + 2 s at 200 W (400 J)
    assert integrate_power_mj(SAMPLES) == 550_000.0


def test_trapezoid_inside_a_window() -> None:
    # 0.5 s from 150 to 200 W (87.5 J) + 1 s at 200 W
    assert integrate_power_mj(SAMPLES, S // 2, 2 * S) == 287_500.0


def test_trapezoid_holds_the_edge_samples_outside_their_span() -> None:
    assert integrate_power_mj(SAMPLES, -1 * S, 4 * S) == 100_000.0 + 550_000.0 + 200_000.0


def test_trapezoid_sorts_and_counts_a_timestamp_once() -> None:
    shuffled = [SAMPLES[2], SAMPLES[0], PowerSample(1 * S, 999_999.0), SAMPLES[1]]
    assert integrate_power_mj(shuffled) == integrate_power_mj(
        [SAMPLES[0], PowerSample(1 * S, 999_999.0), SAMPLES[2]]
    )


def test_trapezoid_single_sample_and_errors() -> None:
    one = [PowerSample(5 * S, 50_000.0)]
    assert integrate_power_mj(one) == 0.0
    assert integrate_power_mj(one, 0, 2 * S) == 100_000.0
    with pytest.raises(ValueError, match="no power samples"):
        integrate_power_mj([])
    with pytest.raises(ValueError, match="before it starts"):
        integrate_power_mj(one, 2 * S, S)


@pytest.mark.parametrize(
    ("period", "interval"), [(None, 0.01), (0.002, 0.005), (0.05, 0.025), (1.0, 0.1)]
)
def test_sampling_interval(period: float | None, interval: float) -> None:
    assert sampling_interval_s(period) == interval


# --- sampler -------------------------------------------------------------------------------------


def test_sample_once_keeps_new_timestamps_only(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep, update_period_s=0.02)
    sampler = PowerSampler(fake, interval_s=0.005)
    for _ in range(3):
        sampler.sample_once()
    clock.advance_s(0.02)
    sampler.sample_once()
    assert sampler.samples == [PowerSample(0, 100_000.0), PowerSample(20_000, 100_000.0)]
    assert sampler.energy_mj() == 2_000.0
    assert fake.calls["power"] == 4


def test_sampler_interval_from_the_power_update_period(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep, update_period_s=0.02)
    assert PowerSampler(fake).interval_s == 0.01  # measured: 20 ms, halved
    assert fake.known_power_update_period_s() == 0.02
    assert fake.known_update_period_s() is None  # the counter's period is not asked
    fake.set_counter_update_period_s(0.3)
    assert PowerSampler(fake).interval_s == 0.01  # still the power reading's
    fake.set_power_update_period_s(0.3)
    assert PowerSampler(fake).interval_s == 0.1  # capped
    with pytest.raises(ValueError, match=r"interval_s must be >= 0.005 s"):
        PowerSampler(fake, interval_s=0.004)


def test_sampler_thread_with_a_real_clock() -> None:
    fake = FakeDevice(power_mw=100_000.0, update_period_s=0.005)
    sampler = PowerSampler(fake, interval_s=0.005)
    sampler.start()
    time.sleep(0.06)
    samples = sampler.stop()
    assert not sampler.running
    stamps = [s.timestamp_us for s in samples]
    assert stamps == sorted(set(stamps))
    assert {(t - stamps[0]) % 5_000 for t in stamps} == {0}  # one per counter update
    assert {s.power_mw for s in samples} == {100_000.0}
    assert integrate_power_mj(samples) == 100_000.0 * (stamps[-1] - stamps[0]) / 1e6
    with pytest.raises(RuntimeError, match="already started"):
        sampler.start()


def test_sampler_hands_thread_errors_to_stop(clock: ManualClock) -> None:
    error = DeviceError("power read failed")
    fake = FakeDevice(clock=clock, sleep=clock.sleep, fail_on={"power": error})
    sampler = PowerSampler(fake, interval_s=0.005)
    sampler.start()
    with pytest.raises(DeviceError) as info:
        sampler.stop()
    assert info.value is error
    assert sampler.samples == []


# --- energy windows ------------------------------------------------------------------------------


def test_window_counter_only(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep, power_mw=100_000.0)
    with EnergyWindow(fake, sample_power=False) as window:
        clock.advance_s(5.0)
    result = window.result
    assert result is not None
    assert (result.start_us, result.end_us, result.duration_s) == (0, 5 * S, 5.0)
    assert result.counter_mj == 500_000
    assert result.integrated_mj is None
    assert result.source == "counter"
    assert result.energy_mj == 500_000.0
    assert result.mean_power_w == 100.0
    assert result.disagreement is None
    assert fake.calls["synchronize"] == 2
    assert fake.calls["energy"] == 2
    assert fake.calls["power"] == 0


def test_window_counter_and_integration_agree(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep, power_mw=300_000.0, update_period_s=0.02)
    with EnergyWindow(fake, interval_s=0.005) as window:
        clock.advance_s(5.0)
    result = window.result
    assert result is not None
    assert result.counter_mj == 1_500_000
    assert result.integrated_mj == 1_500_000.0
    assert result.disagreement == 0.0
    assert result.samples[-1] == PowerSample(5 * S, 300_000.0)  # the last sample, taken at stop


def test_window_power_only_when_there_is_no_counter(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep, power_mw=50_000.0, has_energy_counter=False)
    with EnergyWindow(fake, interval_s=0.005) as window:
        clock.advance_s(2.0)
    result = window.result
    assert result is not None
    assert result.counter_mj is None
    assert result.source == "power_integration"
    assert result.energy_mj == 100_000.0
    assert result.energy_unavailable_reason == (
        "energy unavailable: fake device configured without an energy counter"
    )
    assert result.unavailable_reason is None


def test_window_error_inside_the_block_stops_the_sampler(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep)
    window = EnergyWindow(fake, interval_s=0.005)
    with pytest.raises(KeyError), window:
        raise KeyError("operator failed")
    assert window.result is None
    assert window._sampler is not None
    assert not window._sampler.running


def test_window_read_failure_at_start(clock: ManualClock) -> None:
    fake = FakeDevice(clock=clock, sleep=clock.sleep)
    fake.fail_next("energy", DeviceError("counter read failed"))
    window = EnergyWindow(fake, interval_s=0.005)
    with pytest.raises(DeviceError, match="counter read failed"), window:
        pass
    assert window._sampler is not None
    assert not window._sampler.running


def test_result_disagreement_and_dict() -> None:
    result = EnergyWindowResult(
        start_us=0,
        end_us=2 * S,
        counter_mj=1_000,
        integrated_mj=1_010.0,
        samples=(PowerSample(0, 500.0), PowerSample(2 * S, 510.0)),
        energy_unavailable_reason=None,
        power_unavailable_reason=None,
    )
    assert result.disagreement == 0.01
    assert result.as_dict() == {
        "start_us": 0,
        "end_us": 2 * S,
        "duration_s": 2.0,
        "counter_mj": 1_000,
        "integrated_mj": 1_010.0,
        "disagreement": 0.01,
        "source": "counter",
        "energy_mj": 1_000.0,
        "samples": [[0, 500.0], [2 * S, 510.0]],
        "unavailable_reason": None,
    }


# --- update period, throttle flags ---------------------------------------------------------------


def test_measure_update_period_takes_the_median_gap(clock: ManualClock) -> None:
    changes_ms = iter([3, 40, 70, 85, 125, 150, 10_000])  # gaps 37, 30, 15, 40, 25 ms
    current = {"value": 0, "next": next(changes_ms)}

    def probe() -> int:
        if clock() >= current["next"] * 1_000_000:
            current["value"] += 1
            current["next"] = next(changes_ms)
        return current["value"]

    period = measure_update_period_s(probe, clock=clock, sleep=clock.sleep, poll_interval_s=0.001)
    assert period == 0.03


def test_a_poll_that_wakes_late_does_not_shorten_the_period(clock: ManualClock) -> None:
    """A 5 ms counter whose poll after one update wakes 3.8 ms late (CI once read 1.2 ms)."""
    late = {"done": False}

    def sleep(seconds: float) -> None:
        if not late["done"] and clock() >= 12_000_000:
            late["done"] = True
            clock.advance_s(seconds + 0.0038)
        else:
            clock.advance_s(seconds)

    period = measure_update_period_s(
        lambda: clock() // 5_000_000, clock=clock, sleep=sleep, poll_interval_s=0.0005
    )
    assert period == pytest.approx(0.005, abs=0.0005)


def test_measure_update_period_returns_what_it_has_at_timeout(clock: ManualClock) -> None:
    def probe() -> int:
        return int(clock() >= 100_000_000) + int(clock() >= 150_000_000)  # one full gap: 50 ms

    assert (
        measure_update_period_s(
            probe, clock=clock, sleep=clock.sleep, poll_interval_s=0.001, timeout_s=1.0
        )
        == 0.05
    )
    assert clock() == 1_000_000_000


def test_measure_update_period_raises_without_two_changes(clock: ManualClock) -> None:
    with pytest.raises(DeviceError) as info:
        measure_update_period_s(lambda: 1, clock=clock, sleep=clock.sleep, timeout_s=0.5)
    assert str(info.value) == (
        "the energy/power reading did not change twice within 0.5 s; "
        "cannot measure its update period"
    )


def test_decode_clock_event_reasons() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1 | 0x8 | 0x80) == (
        "gpu_idle",
        "hw_slowdown",
        "hw_power_brake_slowdown",
    )
    assert decode_clock_event_reasons(0x4 | 0x1000) == ("sw_power_cap", "0x1000")
