"""The fake device: deterministic counters, settable failures, selection by setting."""

from __future__ import annotations

import pytest
import torch

from operator_db.config import get_settings
from operator_db.devices import FakeDevice, fake_from_settings, open_device
from operator_db.errors import (
    ConfigurationError,
    DeviceError,
    DeviceUnsupportedError,
    PermissionDeniedError,
)
from tests.devices.clock import ManualClock


def make(clock: ManualClock, **kwargs: object) -> FakeDevice:
    return FakeDevice(clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


def test_identity_and_torch_device(clock: ManualClock) -> None:
    with make(clock) as fake:
        ident = fake.identity()
        assert fake.kind_name() == "fake:FakeGPU"
        assert (ident.device_type, ident.vendor, ident.device_id) == (
            "fake",
            "operator-db",
            "fake-0",
        )
        assert fake.torch_device() == torch.device("cpu")
        assert fake.power_scope() == "fake"
    assert fake.closed


def test_energy_is_power_times_time_at_each_update(clock: ManualClock) -> None:
    fake = make(clock, power_mw=100_000.0, update_period_s=0.02)
    assert fake.energy_mj() == 0
    clock.advance_s(1.019)  # the counter last moved at 1.000 s
    assert fake.energy_mj() == 100_000
    clock.advance_s(0.001)
    assert fake.energy_mj() == 102_000
    assert fake.calls["energy"] == 3


def test_power_changes_are_integrated_exactly(clock: ManualClock) -> None:
    fake = make(clock, power_mw=100_000.0, update_period_s=0.02)
    clock.advance_s(1.0)
    fake.set_power_mw(300_000.0)
    clock.advance_s(0.5)
    assert fake.energy_mj() == 100_000 + 150_000
    assert fake.energy_between_mj(0, clock()) == 250_000.0


def test_power_sample_carries_the_update_time(clock: ManualClock) -> None:
    clock.advance_s(10.0)
    fake = make(clock, power_mw=70_000.0, update_period_s=0.02)
    clock.advance_s(0.05)
    assert fake.power_mw() == (10_040_000, 70_000.0)
    fake.set_power_mw(90_000.0)
    assert fake.power_mw() == (10_040_000, 70_000.0)  # the new value shows at the next update
    clock.advance_s(0.01)
    assert fake.power_mw() == (10_060_000, 90_000.0)


def test_update_period_is_measured(clock: ManualClock) -> None:
    fake = make(clock, update_period_s=0.005)
    assert fake.counter_update_period_s() == 0.005


def test_update_period_from_power_without_counter(clock: ManualClock) -> None:
    fake = make(clock, update_period_s=0.01, has_energy_counter=False)
    assert fake.counter_update_period_s() == 0.01


def test_without_counter_or_power(clock: ManualClock) -> None:
    fake = make(clock, has_energy_counter=False, has_power=False)
    assert fake.energy_mj() is None
    assert fake.power_mw() is None
    assert fake.energy_unavailable_reason() == (
        "energy unavailable: fake device configured without an energy counter"
    )
    assert fake.power_unavailable_reason() == (
        "power unavailable: fake device configured without a power reading"
    )
    assert fake.counter_update_period_s() is None
    assert fake.power_scope() is None


def test_fail_next_then_recover(clock: ManualClock) -> None:
    fake = make(clock)
    error = DeviceError("flaky read")
    fake.fail_next("energy", error, times=2)
    for _ in range(2):
        with pytest.raises(DeviceError) as info:
            fake.energy_mj()
        assert info.value is error
    assert fake.energy_mj() == 0
    assert fake.calls["energy"] == 3


def test_fail_on_is_permanent_until_removed(clock: ManualClock) -> None:
    fake = make(clock, fail_on={"power": PermissionDeniedError("no power for you")})
    for _ in range(3):
        with pytest.raises(PermissionDeniedError, match="no power for you"):
            fake.power_mw()
    del fake.fail_on["power"]
    assert fake.power_mw() is not None
    fake.fail_on["telemetry"] = DeviceUnsupportedError("no telemetry")
    with pytest.raises(DeviceUnsupportedError):
        fake.telemetry()
    fake.fail_on["synchronize"] = DeviceError("sync failed")
    with pytest.raises(DeviceError, match="sync failed"):
        fake.synchronize()
    assert fake.calls == {"open": 1, "power": 4, "telemetry": 1, "synchronize": 1}


def test_refuse_open(clock: ManualClock) -> None:
    with pytest.raises(DeviceError) as info:
        make(clock, refuse_open=True)
    assert str(info.value) == "fake device 'FakeGPU' refused to open (refuse_open)"
    with pytest.raises(PermissionDeniedError, match="nope"):
        make(clock, refuse_open=PermissionDeniedError("nope"))


def test_closed_device_refuses(clock: ManualClock) -> None:
    fake = make(clock)
    fake.close()
    with pytest.raises(DeviceError, match=r"fake device is closed \(energy\)"):
        fake.energy_mj()


def test_jittered_updates_come_late_by_a_fixed_part_of_the_jitter(clock: ManualClock) -> None:
    """Each update is delayed by its own fixed share of ``update_jitter_s``; none is early, and
    the counter still holds the exact energy up to its update."""
    t0 = clock()
    fake = make(clock, power_mw=100_000.0, update_period_s=0.1, update_jitter_s=0.01)
    seen: list[tuple[int, int]] = []
    last = fake.energy_mj()
    for _ in range(1000):
        clock.advance_s(0.001)
        value = fake.energy_mj()
        if value != last:
            seen.append((clock(), value))
            last = value
    delays = [(t - t0) % 100_000_000 for t, _ in seen]
    assert all(d <= 10_000_000 for d in delays) and len(set(delays)) > 3
    for t, value in seen:  # read within 1 ms of the update: 100 W × (t − ≤1 ms)
        assert 100 * ((t - t0) / 1e6 - 1) <= value <= 100 * (t - t0) / 1e6


def test_a_sampling_counter_sees_only_the_end_of_each_period(clock: ManualClock) -> None:
    """``counter_sample_s``: each update adds the mean power of the last 25 ms before it × the
    period, so power drawn outside those 25 ms is not seen (Yang et al., SC'24)."""
    fake = make(clock, power_mw=100_000.0, update_period_s=0.1, counter_sample_s=0.025)
    clock.advance_s(0.35)
    assert fake.energy_mj() == 30_000  # steady: 3 periods × 100 W, as an integrating counter
    fake.set_power_mw(500_000.0)  # 0.35–0.37 s, unseen: the next sample is 0.375–0.4 s
    clock.advance_s(0.02)
    fake.set_power_mw(100_000.0)
    clock.advance_s(0.035)
    assert fake.energy_mj() == 40_000
    assert fake.energy_between_mj(0, clock()) == pytest.approx(40_500 + 8_000)


def test_unknown_operation_and_bad_parameters(clock: ManualClock) -> None:
    fake = make(clock)
    with pytest.raises(ValueError, match="unknown fake-device operation 'read'"):
        fake.fail_next("read", DeviceError("x"))
    with pytest.raises(ValueError, match="update_period_s must be > 0"):
        make(clock, update_period_s=0)
    with pytest.raises(ValueError, match="power_mw must be >= 0"):
        fake.set_power_mw(-1)
    with pytest.raises(ValueError, match="update_jitter_s must be >= 0 and shorter"):
        make(clock, update_period_s=0.1, update_jitter_s=0.1)
    with pytest.raises(ValueError, match="counter_sample_s must be >= 0"):
        make(clock, counter_sample_s=-1)


def test_telemetry_is_fixed_and_reasons_settable(clock: ManualClock) -> None:
    fake = make(clock, clock_event_reasons=0x20)
    t = fake.telemetry()
    assert (t.sm_clock_mhz, t.mem_clock_mhz, t.temperature_c, t.power_limit_w) == (
        1980,
        2619,
        40.0,
        700.0,
    )
    assert t.throttled is True
    fake.clock_event_reasons = 0
    assert fake.telemetry().throttled is False


# --- selection by setting ------------------------------------------------------------------------


def test_open_device_fake_by_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_DEVICE", "fake")
    monkeypatch.setenv("OPDB_FAKE_POWER_W", "250")
    monkeypatch.setenv("OPDB_FAKE_UPDATE_PERIOD_S", "0.05")
    monkeypatch.setenv("OPDB_FAKE_ENERGY_COUNTER", "false")
    with open_device() as device:
        assert isinstance(device, FakeDevice)
        assert device.kind_name() == "fake:FakeGPU"
        assert device.update_period_s == 0.05
        assert device.energy_mj() is None
        sample = device.power_mw()
        assert sample is not None
        assert sample.power_mw == 250_000.0


def test_fake_fail_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_FAKE_FAIL", " energy, telemetry ")
    with open_device("fake") as device:
        with pytest.raises(DeviceError) as info:
            device.energy_mj()
        assert str(info.value) == "fake device: injected failure in energy (fake_fail setting)"
        with pytest.raises(DeviceError):
            device.telemetry()
        assert device.power_mw() is not None


def test_fake_fail_open_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_FAKE_FAIL", "open")
    with pytest.raises(DeviceError) as info:
        open_device("fake")
    assert str(info.value) == "fake device: injected failure in open (fake_fail setting)"


def test_fake_fail_setting_unknown_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_FAKE_FAIL", "energy,explode")
    with pytest.raises(ConfigurationError) as info:
        fake_from_settings(get_settings())
    assert str(info.value) == (
        "fake_fail: unknown operation(s) explode; "
        "expected some of open, energy, power, telemetry, synchronize"
    )


def test_fake_from_settings_overrides(clock: ManualClock) -> None:
    fake = fake_from_settings(get_settings(), clock=clock, name="Other")
    assert fake.kind_name() == "fake:Other"
    clock.advance_s(1.0)
    assert fake.energy_mj() == 100_000  # the default 100 W
