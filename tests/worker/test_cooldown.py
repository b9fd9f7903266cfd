"""The cooldown between energy jobs: only while the device is warmer than at idle."""

from __future__ import annotations

import pytest

from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.measure.settings import fast_settings
from operator_db.worker.daemon import COOLDOWN_STEP_S, Worker, WorkerOptions


def _worker(store: Store, device: FakeDevice, sleeps: list[float], **settings: object) -> Worker:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        device.temperature_c -= 2.0 * seconds / COOLDOWN_STEP_S  # 2 °C a step, cooling

    values: dict[str, object] = {"cooldown_s": 5.0, **settings}
    return Worker(store, device, fast_settings(**values), WorkerOptions(poll_s=0.01), sleep=sleep)


@pytest.mark.parametrize(
    ("start_c", "expected_s"),
    [(50.0, 4 * COOLDOWN_STEP_S), (41.5, 0.0), (90.0, 5.0)],
)
def test_the_device_cools_until_it_is_as_warm_as_at_idle(
    store: Store, start_c: float, expected_s: float
) -> None:
    """Idle baseline 40 °C, margin 2 °C: from 50 °C four steps (to 42), from 41.5 none, from
    90 °C the longest pause (``cooldown_s``) and no more."""
    device = FakeDevice(temperature_c=start_c)
    sleeps: list[float] = []
    worker = _worker(store, device, sleeps)
    worker._idle_temperature = 40.0
    worker._cool_down()
    assert sum(sleeps) == pytest.approx(expected_s) and worker.cooled_s == pytest.approx(expected_s)


def test_held_down_clocks_need_a_cooldown_even_at_idle_temperature(store: Store) -> None:
    device = FakeDevice(temperature_c=40.0, clock_event_reasons=0x20)  # SW thermal slowdown
    sleeps: list[float] = []
    worker = _worker(store, device, sleeps)
    worker._idle_temperature = 40.0
    worker._cool_down()
    assert sum(sleeps) == pytest.approx(5.0)


@pytest.mark.parametrize("how", ["fixed", "no baseline"])
def test_a_fixed_cooldown_or_an_unknown_temperature_pauses_the_whole_time(
    store: Store, how: str
) -> None:
    device = FakeDevice(temperature_c=20.0)
    sleeps: list[float] = []
    worker = _worker(store, device, sleeps, cooldown="fixed" if how == "fixed" else "adaptive")
    worker._idle_temperature = None if how == "no baseline" else 40.0
    worker._cool_down()
    assert sleeps == [5.0]
