"""A configuration without FLOPs or bytes (the schema allows one) on every roofline: no crash, no
point, and the plot, ``opdb roofline`` and the kind's roofline say how many were left out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.estimate.rooflines import model_roofline
from operator_db.roofline.chips import find_chip
from operator_db.roofline.record import store_spec_peaks
from operator_db.specs import parse_spec
from tests.helpers import linear_op, measure_everything, relu_op, run_cli, spec_dict

KIND = "fake:FakeGPU"


def bare_relu() -> dict[str, Any]:
    """A ReLU as a hand-written spec may give it: no FLOPs, no bytes."""
    op = relu_op([4, 32])
    for field in ("flops", "bytes", "flop_rule"):
        del op[field]
    return op


def ingest(capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path, spec: Any) -> None:
    """Store ``spec`` as given, as an import or a version before the doors counted FLOPs did
    (``opdb ingest`` now counts a ReLU's itself: ops.admission.recompute_costs)."""
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, f"{spec['model']['name']}.yaml")])


def with_peaks(store: Store, kind: str = KIND) -> None:
    chip = find_chip("NVIDIA H100 SXM5 80GB")
    assert chip is not None
    with store.transaction() as session:
        store_spec_peaks(session, chip, kind)


def test_a_configuration_without_work_is_left_out_of_the_plot(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest(capsys, db_url, tmp_path, spec_dict("bare", [linear_op(), bare_relu()]))
    measure_everything(db_url, KIND)
    with_peaks(store)
    with store.transaction(read_only=True) as session:
        view = model_roofline(session, "bare", KIND)
        png = view.render("png")
    relu = view.table.set_index("op").loc["torch.nn.ReLU"]
    assert math.isnan(relu["flops"]) and math.isnan(relu["intensity"])
    assert relu["time_per_call_s"] == pytest.approx(1e-3)  # measured, only not drawn
    model = view.table.set_index("op").loc["(model)"]
    assert math.isnan(model["flops"])  # a sum without the ReLU would understate it
    assert png.startswith(b"\x89PNG")
    out = tmp_path / "r.png"
    drawn = run_cli(capsys, "roofline", "bare", "-o", str(out), "--db", db_url)
    assert drawn.code == 0, drawn.err
    assert "1 configurations without FLOPs/bytes left out" in drawn.out
    assert "nan" not in drawn.out
    kind = run_cli(capsys, "roofline", "--device-kind", KIND, "-o", str(out), "--db", db_url)
    assert kind.code == 0, kind.err
    assert f"wrote {out}: 1 configurations on {KIND}" in kind.out
    assert "1 configurations without FLOPs/bytes left out" in kind.out
    estimate = run_cli(capsys, "estimate", "bare", "--device-kind", KIND, "--db", db_url)
    assert estimate.code == 0, estimate.err
    report = run_cli(capsys, "report", "-o", str(tmp_path / "report"), "--db", db_url)
    assert report.code == 0, report.err
    text = (tmp_path / "report" / "report.md").read_text()
    assert "; 1 configurations without FLOPs/bytes left out" in text


def test_nothing_measured_is_one_line(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest(capsys, db_url, tmp_path, spec_dict("bare", [linear_op(), bare_relu()]))
    with_peaks(store)
    out = str(tmp_path / "r.png")
    refused = run_cli(capsys, "roofline", "bare", "--device-kind", KIND, "-o", out, "--db", db_url)
    assert refused.code == 1
    assert refused.err.strip().splitlines() == [
        f"error: nothing measured on {KIND}: no configuration of bare (run `opdb measure` or a "
        "worker first)"
    ]
    only = spec_dict("only", [bare_relu()])
    ingest(capsys, db_url, tmp_path, only)
    measure_everything(db_url, KIND)
    left = run_cli(capsys, "roofline", "only", "-o", out, "--db", db_url)
    assert left.code == 1
    assert "(1 configurations without FLOPs/bytes left out)" in left.err


def test_a_spec_without_work_does_not_break_another_models_roofline(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first spec to store a configuration wins: the ReLU shared by both models keeps no
    # FLOPs; the second model's roofline still draws, leaving it out.
    ingest(capsys, db_url, tmp_path, spec_dict("bare", [bare_relu()]))
    ingest(capsys, db_url, tmp_path, spec_dict("full", [linear_op(), relu_op([4, 32])]))
    measure_everything(db_url, KIND)
    with_peaks(store)
    out = tmp_path / "full.png"
    drawn = run_cli(capsys, "roofline", "full", "-o", str(out), "--db", db_url)
    assert drawn.code == 0, drawn.err
    assert "1 configurations without FLOPs/bytes left out" in drawn.out
    assert out.read_bytes().startswith(b"\x89PNG")
