"""The CPU device: identity from cpuinfo, RAPL zones (wrap-around, unreadable) in a tmp tree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from operator_db.devices import CpuDevice, EnergyWindow, Rapl
from operator_db.devices.allotment import CpuAllotment, CpuQuota
from operator_db.devices.host_cpu import read_cpu_model
from operator_db.errors import DeviceError, PermissionDeniedError
from tests.devices.clock import ManualClock

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC 7B13   64-Core Processor
processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
"""
MAX_RANGE = 1_000_000


def write_zone(root: Path, zone: str, name: str, energy_uj: int, max_uj: int = MAX_RANGE) -> None:
    path = root / zone
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")


def set_energy(root: Path, zone: str, energy_uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def cpuinfo(tmp_path: Path) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    return path


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages, each with core (ignored) and dram sub-zones, plus psys (ignored)."""
    root = tmp_path / "powercap"
    write_zone(root, "intel-rapl:0", "package-0", 990_000)
    write_zone(root, "intel-rapl:0:0", "core", 500_000)
    write_zone(root, "intel-rapl:0:1", "dram", 10_000)
    write_zone(root, "intel-rapl:1", "package-1", 200_000)
    write_zone(root, "intel-rapl:1:0", "dram", 20_000)
    write_zone(root, "intel-rapl:2", "psys", 777_000)
    (root / "intel-rapl-mmio:0").mkdir()  # a duplicate interface of package-0: not counted
    return root


@pytest.fixture
def restore_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_cpu_model_from_cpuinfo(cpuinfo: Path) -> None:
    assert read_cpu_model(cpuinfo) == ("AMD EPYC 7B13 64-Core Processor", "AMD")


def test_cpu_model_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("operator_db.devices.cpu.platform.processor", lambda: "armv8-fallback")
    assert read_cpu_model(tmp_path / "missing") == ("armv8-fallback", "unknown")


def test_identity(cpuinfo: Path, powercap: Path) -> None:
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap) as cpu:
        ident = cpu.identity()
        assert cpu.kind_name() == "cpu:AMD EPYC 7B13 64-Core Processor"
        assert ident.device_type == "cpu"
        assert ident.vendor == "AMD"
        assert ident.device_id == "cpu"
        assert ident.extra["rapl_zones"] == [
            "package-0",
            "package-0/dram",
            "package-1",
            "package-1/dram",
        ]
        assert cpu.torch_device() == torch.device("cpu")
        cpu.synchronize()
        assert cpu.power_mw() is None
        assert cpu.power_unavailable_reason() == (
            "power unavailable: no instant power sensor on the CPU; energy comes from RAPL"
        )


def test_allotment_is_in_identity_and_provenance(cpuinfo: Path, powercap: Path) -> None:
    allotment = CpuAllotment(4, CpuQuota(250000, 100000, "/cg/cpu.max"), logical_cpus=64)
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap, allotment=allotment) as cpu:
        assert cpu.identity().extra["cpu_allotment"]["usable_cores"] == 2.5
        provenance = cpu.provenance()
        assert provenance["cpu_allotment"] == allotment.as_dict()
        assert provenance["cpu_allotment"]["limited_by"] == "cgroup quota"
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap) as cpu:  # this process's own
        assert cpu.provenance()["cpu_allotment"]["usable_cores"] > 0


def test_threads_are_set_and_reported(cpuinfo: Path, powercap: Path, restore_threads: None) -> None:
    with CpuDevice(threads=2, cpuinfo=cpuinfo, powercap_root=powercap) as cpu:
        assert cpu.threads() == 2
        assert cpu.provenance()["torch_threads"] == 2
    with pytest.raises(ValueError, match="threads must be >= 1"):
        CpuDevice(threads=0, cpuinfo=cpuinfo, powercap_root=powercap)


def test_rapl_energy_counts_packages_and_dram(cpuinfo: Path, powercap: Path) -> None:
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap) as cpu:
        assert cpu.energy_unavailable_reason() is None
        assert cpu.energy_mj() == (990_000 + 10_000 + 200_000 + 20_000) // 1000
        set_energy(powercap, "intel-rapl:0:0", 900_000)  # core: ignored
        set_energy(powercap, "intel-rapl:2", 999_999)  # psys: ignored
        set_energy(powercap, "intel-rapl:1", 205_500)
        assert cpu.energy_breakdown_uj() == {
            "package-0": 990_000,
            "package-0/dram": 10_000,
            "package-1": 205_500,
            "package-1/dram": 20_000,
        }
        assert cpu.energy_mj() == 1_225


def test_rapl_wrap_around(powercap: Path) -> None:
    rapl = Rapl(powercap)
    set_energy(powercap, "intel-rapl:0", 500)  # wrapped: 990_000 -> 1_000_000 -> 0 -> 500
    assert rapl.read_uj()["package-0"] == 990_000 + (MAX_RANGE - 990_000) + 500
    set_energy(powercap, "intel-rapl:0", 2_500)
    assert rapl.read_uj()["package-0"] == 1_002_500
    set_energy(powercap, "intel-rapl:0", 100)  # wrapped again
    assert rapl.read_uj()["package-0"] == 1_002_500 + (MAX_RANGE - 2_500) + 100


def test_energy_window_on_rapl(cpuinfo: Path, powercap: Path) -> None:
    cpu = CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap)
    with cpu, EnergyWindow(cpu) as window:
        set_energy(powercap, "intel-rapl:0", 5_000)  # +15_000 µJ across the wrap
        set_energy(powercap, "intel-rapl:0:1", 13_000)  # +3_000 µJ
    result = window.result
    assert result is not None
    assert result.counter_mj == 18
    assert result.source == "counter"
    assert result.integrated_mj is None
    assert result.samples == ()


def test_rapl_unreadable_is_energy_unavailable(
    cpuinfo: Path, powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod does not stop root, so make reads of energy_uj fail the way a non-root read does.
    original = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap) as cpu:
        assert cpu.energy_mj() is None
        assert cpu.energy_breakdown_uj() is None
        assert cpu.energy_unavailable_reason() == (
            f"energy unavailable: {powercap / 'intel-rapl:0' / 'energy_uj'} is not readable "
            "(RAPL is root-only since CVE-2020-8694; run as root or grant read access)"
        )
        assert cpu.counter_update_period_s() is None
        assert cpu.energy_permission_denied() is True
        with EnergyWindow(cpu) as window:
            pass
    result = window.result
    assert result is not None
    assert result.energy_mj is None
    assert result.unavailable_reason == (
        f"{cpu.energy_unavailable_reason()}; {cpu.power_unavailable_reason()}"
    )


def test_rapl_missing_is_energy_unavailable(cpuinfo: Path, tmp_path: Path) -> None:
    root = tmp_path / "no-powercap"
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=root) as cpu:
        assert cpu.energy_mj() is None
        assert cpu.energy_unavailable_reason() == (
            f"energy unavailable: {root} does not exist (no powercap/RAPL on this host)"
        )
        assert cpu.energy_permission_denied() is False
        assert cpu.powercap_root == root


def test_rapl_without_package_zone(cpuinfo: Path, tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    write_zone(root, "intel-rapl:0", "psys", 1)
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=root) as cpu:
        assert cpu.energy_unavailable_reason() == (
            f"energy unavailable: no RAPL package zone under {root}"
        )


def test_rapl_read_failures_after_open(
    cpuinfo: Path, powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap) as cpu:
        (powercap / "intel-rapl:1" / "energy_uj").unlink()
        with pytest.raises(DeviceError, match="RAPL counter read failed: "):
            cpu.energy_mj()
        set_energy(powercap, "intel-rapl:1", 200_000)

        def denied(self: Path, *args: object, **kwargs: object) -> str:
            raise PermissionError(13, "Permission denied", str(self))

        monkeypatch.setattr(Path, "read_text", denied)
        with pytest.raises(PermissionDeniedError, match="RAPL counter not readable: "):
            cpu.energy_mj()


def test_rapl_update_period_with_injected_clock(
    cpuinfo: Path, powercap: Path, clock: ManualClock
) -> None:
    def sleep(seconds: float) -> None:
        before = clock() // 1_000_000
        clock.sleep(seconds)
        if clock() // 1_000_000 != before:  # RAPL updates every 1 ms
            set_energy(powercap, "intel-rapl:0", 990_000 + clock() // 1_000_000 * 61)

    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap, clock=clock, sleep=sleep) as cpu:
        assert cpu.counter_update_period_s() == 0.001


def test_telemetry_is_a_timestamp(cpuinfo: Path, powercap: Path, clock: ManualClock) -> None:
    clock.advance_s(2.0)
    with CpuDevice(cpuinfo=cpuinfo, powercap_root=powercap, clock=clock) as cpu:
        t = cpu.telemetry()
    assert t.timestamp_us == 2_000_000
    assert (t.sm_clock_mhz, t.temperature_c, t.clock_event_reasons) == (None, None, None)
    assert t.throttled is False
