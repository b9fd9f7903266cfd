"""The many-chip roofline: the table's roofs per category, a device's own roofs, the plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db import report as rep
from operator_db.db.store import Store
from operator_db.errors import NotFoundError
from operator_db.roofline.chip_plot import (
    RoofPoint,
    chip_roofs,
    describe_roof,
    device_roofs,
    plot_chip_rooflines,
)
from operator_db.roofline.chips import find_chip
from operator_db.roofline.record import record_peaks, store_measured_peaks, store_spec_peaks
from tests.estimate.test_compose import KIND, setup
from tests.helpers import run_cli
from tests.report.test_report import NOW, png_ok
from tests.roofline.test_peaks import cpu_measured, fake_measured

H100 = "NVIDIA H100 80GB HBM3"


def test_the_chips_cover_cpu_gpu_asic_and_soc() -> None:
    roofs = chip_roofs()
    assert len(roofs) >= 12
    categories = {r.chip.category for r in roofs}
    assert {"server_cpu", "asic", "soc"} <= categories
    assert categories & {"datacenter_gpu", "consumer_gpu"}
    by_name = {r.chip.name: r for r in roofs}
    h100 = by_name["NVIDIA H100 SXM5 80GB"]
    assert (h100.dtype, h100.peaks.flops_per_s, h100.peaks.bytes_per_s) == (
        "float32",
        67.0e12,
        3.35e12,
    )
    assert h100.label == "NVIDIA H100 SXM5 80GB"
    # A TPU publishes no float32 figure: drawn at bfloat16, and labelled so.
    tpu = by_name["Google TPU v4"]
    assert (tpu.dtype, tpu.asked, tpu.peaks.flops_per_s) == ("bfloat16", "float32", 275.0e12)
    assert tpu.label == "Google TPU v4 [bfloat16]"
    # The CPU chips are whole sockets here; only a device's own roof is scaled.
    epyc = by_name["AMD EPYC 9654 (Genoa)"]
    assert epyc.peaks.flops_per_s == 7.3728e12
    assert {r.dtype for r in chip_roofs("bfloat16")} >= {"bfloat16", "float32"}  # M1: float32


def test_device_roofs_are_read_from_the_database(store: Store) -> None:
    with store.transaction() as session:
        record_peaks(session, cpu_measured("vm-2", 2))
        chip = find_chip(H100)
        assert chip is not None
        store_spec_peaks(session, chip, H100)  # spec only: drawn when named
    with store.transaction(read_only=True) as session:
        found = device_roofs(session)
        named = device_roofs(session, kinds=[H100, "cpu:AMD EPYC"])
        with pytest.raises(NotFoundError):
            device_roofs(session, kinds=["NVIDIA Nope"])
    assert [d.kind_name for d in found] == ["cpu:AMD EPYC"]
    cpu = found[0]
    assert cpu.spec is not None and cpu.measured is not None
    assert cpu.spec.flops_per_s == pytest.approx(236.8e9)  # 2 of 96 cores boosted, not 7.37 TFLOP/s
    assert cpu.spec_label == (
        "closest spec-sheet match: AMD EPYC 9654 (Genoa), scaled to 2 of 96 cores at the boost "
        "clock, the socket's bandwidth"
    )
    assert describe_roof(cpu.spec) == "236.8 GFLOP/s, 460.8 GB/s"
    assert describe_roof(cpu.measured) == "120 GFLOP/s, 20 GB/s"
    assert describe_roof(None) == "none"
    assert [d.kind_name for d in named] == [H100, "cpu:AMD EPYC"]
    assert named[0].measured is None and named[0].spec is not None
    assert named[0].spec_label == "NVIDIA H100 SXM5 80GB spec"


def test_plot_is_written(store: Store, tmp_path: Path) -> None:
    with store.transaction() as session:
        record_peaks(session, cpu_measured("vm-2", 2))
    with store.transaction(read_only=True) as session:
        devices = device_roofs(session)
    path = plot_chip_rooflines(
        tmp_path / "sub" / "chips.png",
        devices=devices,
        points=[RoofPoint("mlp", 3.0, 2.0e10)],
    )
    assert png_ok(path)
    svg = plot_chip_rooflines(tmp_path / "chips.svg", dtype="bfloat16")
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "Google TPU v4" in text


def test_report_has_the_chips_section(store: Store, tmp_path: Path) -> None:
    with store.transaction() as session:
        record_peaks(session, cpu_measured("vm-2", 2))
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, tmp_path, now=NOW)
    text = path.read_text()
    assert "## Chips" in text and "](chips_roofline.png)" in text
    assert (
        "- cpu:AMD EPYC: measured 120 GFLOP/s, 20 GB/s; spec (closest spec-sheet match: AMD "
        "EPYC 9654 (Genoa), scaled to 2 of 96 cores at the boost clock, the socket's bandwidth) "
        "236.8 GFLOP/s, 460.8 GB/s"
    ) in text
    assert png_ok(tmp_path / "chips_roofline.png")


def test_chips_command(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(store)  # the toy model, measured on KIND
    with store.transaction() as session:
        record_peaks(session, cpu_measured("vm-2", 2))
        store_measured_peaks(session, KIND, fake_measured(KIND))
    out = tmp_path / "chips.png"
    done = run_cli(capsys, "chips", "-o", str(out), "--model", "toy", "--db", db_url)
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0] == f"wrote {out}: 26 chips, 2 device kinds"
    assert "cpu:AMD EPYC: measured 120 GFLOP/s, 20 GB/s" in lines
    assert (
        "  spec (closest spec-sheet match: AMD EPYC 9654 (Genoa), scaled to 2 of 96 cores at the "
        "boost clock, the socket's bandwidth): "
        "236.8 GFLOP/s, 460.8 GB/s"
    ) in lines
    assert f"{KIND}: measured 5e+04 GFLOP/s, 3000 GB/s" in lines
    # The toy is measured on KIND only: one point, there. 4352 FLOPs over 4992 bytes; over its
    # 1.5 ms full run, 2.901 MFLOP/s.
    assert [line for line in lines if line.startswith("toy")] == [
        f"toy (float32) on {KIND}: 0.872 FLOP/byte, 0.002901 GFLOP/s"
    ]
    assert png_ok(out)
    missing = run_cli(capsys, "chips", "--device-kind", "NVIDIA Nope", "--db", db_url)
    assert missing.code == 1 and "no device kind 'NVIDIA Nope'" in missing.err
