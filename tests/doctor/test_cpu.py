"""The doctor on the CPU device: RAPL readable (a tmp tree driven by a manual clock), unreadable
(with the permission fix), missing; threads and the host allocator."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db.config import MeasureSettings, Settings
from operator_db.doctor import DoctorOptions, run_doctor
from operator_db.doctor.cpu import allocator_check, threads_check, usable_cpus
from tests.devices.clock import ManualClock
from tests.devices.test_cpu import write_zone

PACKAGE_W = 20.0
"""The simulated package's power draw, W (µJ per µs)."""


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    write_zone(root, "intel-rapl:0", "package-0", 0, max_uj=2**40)
    write_zone(root, "intel-rapl:0:0", "dram", 5_000, max_uj=2**40)
    return root


def options(root: Path, clock: ManualClock) -> DoctorOptions:
    def sleep(seconds: float) -> None:
        clock.sleep(seconds)  # RAPL updates every 1 ms: package energy = P × whole ms so far
        whole_ms = clock() // 1_000_000
        (root / "intel-rapl:0" / "energy_uj").write_text(f"{int(PACKAGE_W * 1000) * whole_ms}\n")

    return DoctorOptions(window_s=2.0, powercap_root=root, clock=clock, sleep=sleep)


def test_readable_rapl_gives_its_period_and_idle_power(
    powercap: Path, clock: ManualClock, tmp_path: Path
) -> None:
    report = run_doctor(
        Settings(),
        device="cpu",
        db_url=f"sqlite:///{tmp_path / 'no.sqlite'}",
        options=options(powercap, clock),
    )
    assert [c.name for c in report.checks] == [
        "torch",
        "backends",
        "device",
        "threads",
        "energy_counter",
        "host_quiet",
        "idle_power",
        "allocator",
        "measurable",
        "settings",
        "database",
    ]
    rapl = report.get("energy_counter")
    assert rapl is not None and rapl.status == "ok" and rapl.title == "RAPL"
    assert rapl.value == "readable: package-0, package-0/dram; present, updates every 1 ms"
    assert rapl.data["zones"] == ["package-0", "package-0/dram"]
    idle = report.get("idle_power")
    assert idle is not None
    assert idle.value == "20.0 W over 2.00 s (counter)"
    # The window closes on the first counter update after 2 s: 1 ms later; 20 W exactly over it.
    assert idle.data["duration_s"] == pytest.approx(2.001)
    assert idle.data["counter_mj"] == 40_020 and idle.data["integrated_mj"] is None
    measurable = report.get("measurable")
    assert measurable is not None and measurable.value == "time: yes; energy: yes (counter)"
    assert report.exit_code == 0  # the database row only warns: no file yet


def test_unreadable_rapl_warns_with_the_permission_fix(
    powercap: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod does not stop root, so make reads of energy_uj fail the way a non-root read does.
    original = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    report = run_doctor(Settings(), device="cpu", options=options(powercap, clock))
    rapl = report.get("energy_counter")
    assert rapl is not None and rapl.status == "warn"
    assert rapl.value == (
        f"energy unavailable: {powercap / 'intel-rapl:0' / 'energy_uj'} is not readable "
        "(RAPL is root-only since CVE-2020-8694; run as root or grant read access)"
    )
    assert rapl.action.startswith(
        f"sudo chmod o+r {powercap}/intel-rapl:*/energy_uj {powercap}/intel-rapl:*:*/energy_uj"
    )
    assert 'SUBSYSTEM=="powercap"' in rapl.action
    assert report.get("idle_power") is None
    measurable = report.get("measurable")
    assert measurable is not None and measurable.value.startswith("time: yes; energy: no (")
    assert report.exit_code == 0


def test_missing_rapl_warns_that_there_is_no_fix_here(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "no-powercap"
    report = run_doctor(Settings(), device="cpu", options=options(root, clock))
    rapl = report.get("energy_counter")
    assert rapl is not None and rapl.status == "warn"
    assert (
        rapl.value == f"energy unavailable: {root} does not exist (no powercap/RAPL on this host)"
    )
    assert rapl.action.startswith("none on this host: it exposes no RAPL")
    measurable = report.get("measurable")
    assert measurable is not None
    assert measurable.value == (
        f"time: yes; energy: no ({root} does not exist (no powercap/RAPL on this host))"
    )
    assert report.exit_code == 0


def test_threads_more_than_usable_cpus_warn() -> None:
    cpus = usable_cpus()
    row = threads_check(Settings(measure=MeasureSettings(threads=cpus + 1)), 1)
    assert row.status == "warn"
    assert row.data == {"torch_threads": 1, "setting": cpus + 1, "worker": cpus + 1, "usable": cpus}
    assert f"OPDB_MEASURE__THREADS={cpus}" in row.action
    row = threads_check(Settings(), 1)
    assert row.status == "ok"
    assert row.value == (
        f"torch uses 1, the worker 1 (OPDB_MEASURE__THREADS unset: the worker keeps 1); "
        f"{cpus} CPU(s) usable"
    )


def test_allocator_setting_off_warns() -> None:
    row = allocator_check(Settings(measure=MeasureSettings(retain_freed_memory=False)))
    assert row.status == "warn" and "RETAIN_FREED_MEMORY=false" in row.value
    row = allocator_check(Settings())
    assert row.status in ("ok", "warn")  # warn only where the C library is not glibc
    assert row.data["state"] == row.value


def test_allocator_says_whether_the_process_started_with_huge_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``opdb doctor`` starts as a measuring command does; the check reads its own start."""
    from operator_db.cli.process_env import HUGE_PAGES

    monkeypatch.setenv("GLIBC_TUNABLES", HUGE_PAGES)
    row = allocator_check(Settings())
    assert "; huge pages asked (THP " in row.value and row.data["huge_pages"] is True
    monkeypatch.delenv("GLIBC_TUNABLES")
    row = allocator_check(Settings())
    assert "; huge pages not asked (THP " in row.value and row.data["huge_pages"] is False
