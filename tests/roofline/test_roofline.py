"""Roofline table and plot, significant operators, and the estimate/roofline/peaks commands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sqlalchemy import select

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.db.models import OperatorConfig
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.significant import significance_priorities, significant_configs
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.chips import find_chip
from operator_db.roofline.model import plot_roofline, roofline_table
from operator_db.roofline.peaks import peaks_for_kind
from operator_db.roofline.record import store_spec_peaks
from tests.estimate.test_compose import KIND, setup
from tests.helpers import run_cli

PEAKS = Peaks(flops_per_s=1e9, bytes_per_s=1e8, source="test")
LINEAR = (4096, 4 * (64 + 512 + 32 + 128))  # FLOPs, bytes of Linear(16→32) on 4x16
RELU = (128, 8 * 128)


def test_roofline_table(store: Store) -> None:
    setup(store)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND, EstimateOptions(peaks=PEAKS))
    table = roofline_table(est, spec=PEAKS, measured=None).set_index("op")
    linear = table.loc["torch.nn.Linear"]
    assert linear["intensity"] == pytest.approx(LINEAR[0] / LINEAR[1])
    assert linear["roofline_spec_s"] == pytest.approx(max(LINEAR[0] / 1e9, LINEAR[1] / 1e8))
    assert linear["bound"] == "memory"
    assert linear["achieved_flops_per_s"] == pytest.approx(LINEAR[0] / 1e-3)
    assert linear["efficiency"] == pytest.approx(linear["roofline_spec_s"] / 1e-3)
    model = table.loc["(model)"]
    assert model["flops"] == LINEAR[0] + 2 * RELU[0]
    assert model["bytes"] == LINEAR[1] + 2 * RELU[1]
    assert model["time_per_call_s"] == pytest.approx(1.5e-3)  # the measured full run
    assert model["roofline_spec_s"] == pytest.approx(
        max(LINEAR[0] / 1e9, LINEAR[1] / 1e8) + 2 * max(RELU[0] / 1e9, RELU[1] / 1e8)
    )
    assert model["roofline_measured_s"] is None or math.isnan(model["roofline_measured_s"])


def test_plot_is_written(store: Store, tmp_path: Path) -> None:
    setup(store)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND, EstimateOptions(peaks=PEAKS))
    table = roofline_table(est, spec=PEAKS, measured=Peaks(5e8, 5e7, "measured"))
    path = plot_roofline(
        est,
        table,
        tmp_path / "r.png",
        spec=PEAKS,
        measured=Peaks(5e8, 5e7, "measured"),
        chips=["NVIDIA H100 SXM5 80GB"],
    )
    assert path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_significant_configs_by_roofline_then_measured(store: Store) -> None:
    setup(store, measure_relu=False)
    with store.transaction() as session:
        ranked = significant_configs(session, "toy", KIND, target=0.9)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        priorities = significance_priorities(session, "toy", KIND, target=0.5, base=1)
    # Linear is measured (1 ms); ReLU is not: its share comes from the generic roofline
    # (1 TFLOP/s, 100 GB/s): 2 calls × 1024 B / 1e11 B/s ≈ 20 ns, far below the Linear.
    assert [(s.op, s.measured, s.significant) for s in ranked] == [
        ("torch.nn.Linear", True, True),
        ("torch.nn.ReLU", False, False),
    ]
    assert ranked[0].time_s == pytest.approx(1e-3)
    assert ranked[1].time_s == pytest.approx(2 * RELU[1] / 1e11)
    assert sum(s.share for s in ranked) == pytest.approx(1.0)
    assert priorities == {ids["torch.nn.Linear"]: 11, ids["torch.nn.ReLU"]: 1}
    with pytest.raises(ValueError):
        significant_configs(session, "toy", KIND, target=0)


def test_estimate_command(store: Store, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    setup(store)
    table = run_cli(capsys, "estimate", "toy", "--db", db_url)
    assert table.code == 0, table.err
    assert "│ operators (Σ count × per-call) │ 1.40 ms, 140.000 mJ (total)" in table.out
    assert "time -6.7%, energy -6.7%" in table.out
    assert "by operator type" in table.out
    out = run_cli(capsys, "estimate", "toy", "--device-kind", KIND, "--json", "--db", db_url)
    data = json.loads(out.out)
    assert data["time_s"] == pytest.approx(1.4e-3)
    assert data["time_error"] == pytest.approx(-0.1 / 1.5)
    assert [r["op"] for r in data["by_op"]][:2] == ["torch.nn.Linear", "torch.nn.ReLU"]
    csv = run_cli(capsys, "estimate", "toy", "--csv", "--db", db_url)
    assert csv.out.splitlines()[0].startswith("key,op,form,inputs,count")
    assert len(csv.out.strip().splitlines()) == 4
    missing = run_cli(capsys, "estimate", "toy", "--device-kind", "cpu:none", "--db", db_url)
    assert missing.code == 1 and "no device kind 'cpu:none'" in missing.err


def test_roofline_command(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(store)
    out = tmp_path / "plot.png"
    no_peaks = run_cli(capsys, "roofline", "toy", "-o", str(out), "--db", db_url)
    assert no_peaks.code == 1 and "no peaks known for fake:FakeGPU" in no_peaks.err
    chip = find_chip("NVIDIA H100 SXM5 80GB")
    assert chip is not None
    with store.transaction() as session:
        store_spec_peaks(session, chip, KIND)
    done = run_cli(capsys, "roofline", "toy", "-o", str(out), "--chips", "RTX 4090", "--db", db_url)
    assert done.code == 0, done.err
    assert f"wrote {out}: 2 configurations (2 memory-bound, 0 compute-bound)" in done.out
    assert out.stat().st_size > 10_000


def test_peaks_list(capsys: pytest.CaptureFixture[str]) -> None:
    listed = run_cli(capsys, "peaks", "--list")
    assert listed.code == 0
    assert "NVIDIA H100 SXM5 80GB" in listed.out and "Apple M2 Max" in listed.out


def test_peaks_measures_and_with_missing_shows_what_is_stored(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``opdb peaks --missing`` (the demo's step): a second demo does not measure them again."""
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    args = ("peaks", "--device", "fake", "--dtypes", "float32", "--db", db_url)
    first = run_cli(capsys, *args, "--missing")
    assert first.code == 0, first.err
    assert "measured before" not in first.out and "float32" in first.out
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        measured = peaks_for_kind(session, "fake:FakeGPU")
    assert measured.has_measured(["float32"]) and not measured.has_measured(["bfloat16"])
    again = run_cli(capsys, *args, "--missing")
    assert again.code == 0, again.err
    told = "fake:FakeGPU: measured before; `opdb peaks` without --missing measures again"
    assert told in again.out
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        kept = peaks_for_kind(session, "fake:FakeGPU")
    assert kept.measured_references == measured.measured_references
    anew = run_cli(capsys, *args)
    assert anew.code == 0 and "measured before" not in anew.out
