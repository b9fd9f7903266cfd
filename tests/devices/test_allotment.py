"""The cores a process may use: affinity, cgroup v2 ``cpu.max`` and v1 CFS quota files."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db.devices.allotment import (
    CpuAllotment,
    CpuQuota,
    cgroup_cpu_quota,
    parse_cfs_quota,
    parse_cpu_max,
    read_cpu_allotment,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def v2_host(tmp_path: Path, cpu_max: dict[str, str], cgroup: str = "/app/worker") -> Path:
    """A cgroup v2 tree under ``tmp_path/cg`` and a ``/proc/self/cgroup`` naming ``cgroup``."""
    root = tmp_path / "cg"
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    for relative, text in cpu_max.items():
        write(root / relative / "cpu.max", text)
    return write(tmp_path / "proc_cgroup", f"0::{cgroup}\n")


def test_parse_cpu_max() -> None:
    assert parse_cpu_max("max 100000\n") is None
    quota = parse_cpu_max("150000 100000\n", "/cg/cpu.max")
    assert quota == CpuQuota(150000, 100000, "/cg/cpu.max")
    assert quota.cpus == 1.5
    for bad in ("", "150000", "0 100000", "abc 100000", "100 0"):
        with pytest.raises(ValueError):
            parse_cpu_max(bad)


def test_parse_cfs_quota() -> None:
    assert parse_cfs_quota("-1\n", "100000\n") is None
    quota = parse_cfs_quota("50000\n", "100000\n")
    assert quota is not None and quota.cpus == 0.5
    with pytest.raises(ValueError):
        parse_cfs_quota("50000", "0")


def test_v2_quota_is_the_tightest_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    proc = v2_host(
        tmp_path,
        {"": "max 100000", "app": "300000 100000", "app/worker": "max 100000"},
    )
    quota = cgroup_cpu_quota(proc, tmp_path / "cg")
    assert quota is not None
    assert quota.cpus == 3.0
    assert quota.path == str(tmp_path / "cg" / "app" / "cpu.max")


def test_v2_unlimited_and_missing_files_give_no_quota(tmp_path: Path) -> None:
    proc = v2_host(tmp_path, {"app/worker": "max 100000"})
    assert cgroup_cpu_quota(proc, tmp_path / "cg") is None
    assert cgroup_cpu_quota(tmp_path / "no-such-file", tmp_path / "cg") is None


def test_v2_on_a_hybrid_host_is_under_unified(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    write(root / "unified" / "cgroup.controllers", "")
    write(root / "unified" / "cpu.max", "200000 100000\n")
    proc = write(tmp_path / "proc_cgroup", "0::/\n")
    quota = cgroup_cpu_quota(proc, root)
    assert quota is not None and quota.cpus == 2.0


def test_v1_cfs_quota_with_joint_controllers(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    group = root / "cpu,cpuacct" / "docker" / "abc"
    write(group / "cpu.cfs_quota_us", "150000\n")
    write(group / "cpu.cfs_period_us", "100000\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    proc = write(
        tmp_path / "proc_cgroup",
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n",
    )
    quota = cgroup_cpu_quota(proc, root)
    assert quota is not None
    assert quota.cpus == 1.5
    assert quota.path == str(group / "cpu.cfs_quota_us")


def test_v1_inside_a_container_reads_the_mount_root(tmp_path: Path) -> None:
    # /proc/self/cgroup names the host's path, which the container's mount does not have.
    root = tmp_path / "cg"
    write(root / "cpu" / "cpu.cfs_quota_us", "400000\n")
    write(root / "cpu" / "cpu.cfs_period_us", "100000\n")
    proc = write(tmp_path / "proc_cgroup", "1:cpu:/kubepods/pod1/ctr\n")
    quota = cgroup_cpu_quota(proc, root)
    assert quota is not None and quota.cpus == 4.0


def test_allotment_takes_the_smaller_of_affinity_and_quota(tmp_path: Path) -> None:
    proc = v2_host(tmp_path, {"app/worker": "150000 100000"})
    allot = read_cpu_allotment(
        affinity=lambda: {0, 1, 2, 3},
        proc_cgroup=proc,
        cgroup_root=tmp_path / "cg",
        cpu_count=lambda: 8,
    )
    assert allot.usable_cores == 1.5
    assert allot.limited_by == "cgroup quota"
    assert allot.as_dict()["usable_cores"] == 1.5
    assert allot.as_dict()["quota_path"] == str(tmp_path / "cg" / "app/worker" / "cpu.max")
    assert allot.describe().startswith("1.5 cores (affinity: 4 of 8 logical CPUs; cgroup quota")
    # A quota above the affinity mask does not add CPUs.
    proc = v2_host(tmp_path, {"app/worker": "800000 100000"})
    allot = read_cpu_allotment(
        affinity=lambda: {2, 3}, proc_cgroup=proc, cgroup_root=tmp_path / "cg"
    )
    assert (allot.usable_cores, allot.limited_by) == (2.0, "affinity")


def test_allotment_without_quota_is_the_affinity_mask(tmp_path: Path) -> None:
    proc = v2_host(tmp_path, {"": "max 100000"})
    allot = read_cpu_allotment(
        affinity=lambda: {5}, proc_cgroup=proc, cgroup_root=tmp_path / "cg", cpu_count=lambda: 96
    )
    assert allot == CpuAllotment(affinity_cpus=1, quota=None, logical_cpus=96)
    assert allot.usable_cores == 1.0
    assert allot.describe() == "1 core (affinity: 1 of 96 logical CPUs; no cgroup quota)"


def test_this_process_has_an_allotment() -> None:
    allot = read_cpu_allotment()
    assert 0 < allot.usable_cores <= (allot.logical_cpus or allot.affinity_cpus)
