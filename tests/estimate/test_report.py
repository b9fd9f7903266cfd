"""The report: files written, tables and image links in it, an empty database, many points."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from operator_db.cli.report import report
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.errors import NotFoundError, OperatorDBError
from operator_db.estimate import report as rep
from operator_db.estimate.report import plots as report_plots
from tests.estimate.test_studies import CPU, GPU, seed

NOW = datetime(2025, 1, 2, 3, 4, tzinfo=UTC)


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_ok(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def test_markdown_report(store: Store, tmp_path: Path) -> None:
    seed(store)
    out = tmp_path / "rep"
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, out, source="test-db", now=NOW)
    assert path == out / "report.md"
    text = path.read_text()
    assert text.startswith("# operator-db report\n\nGenerated 2025-01-02 03:04 UTC from test-db. ")
    assert "4 models in the database, 4 with a measured full-model run" in text
    assert f"- {GPU} (gpu): 2 models measured\n- {CPU} (cpu): 4 models measured" in text
    assert f"| mlp-b4 | {GPU} | inference | 4 | 0.25 | 16,000 |" in text
    # The measured-models table: 2 ms, 4/2 ms = 2000 samples/s, composed 1.8 ms (−10 %).
    assert (
        f"| mlp-b4 | {CPU} | inference | 4 | 2 | 2000 | 0.2 | 4.352e-06 | 0.000544 | 0.002176 "
        "| 1.8 | 100 % | -10.0 % |"
    ) in text
    assert f"| mlp-b8 | {CPU} | inference | 8 | 4 | 2000 | — |" in text
    # The batch table: the gain of batch 8 over batch 1 on the CPU.
    assert f"| mlp | {CPU} | 8 | mlp-b8 | 4 | 0.5 | 2000 | 2.00 |" in text
    assert "- mlp: module:operator_db.examples:mlp · B×16\n" in text
    # The correlation matrix: CPU latency and FLOPs agree in rank; GPU has only two models.
    assert "|  | CPU latency | GPU latency | FLOPs | parameters |" in text
    assert "| CPU latency | 1.00 | — | 1.00 | — |" in text
    # Forward and backward: 3.2 ms / 1.8 ms.
    assert (
        f"| toy-train | {CPU} | 3 | 4.352e-06 | 8.448e-06 | 1.94 | 100 % | 1.8 | 3.2 | 1.78 |"
        in text
    )
    for name in rep.PLOT_FILES:
        assert png_ok(out / name), name
        assert f"]({name})" in text
    for name in rep.TABLE_FILES:
        assert (out / name).is_file()
    assert len(pd.read_csv(out / "models.csv")) == 6


def test_html_report_for_one_kind(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Drawing is covered above; here a stub PNG keeps the test fast.
    monkeypatch.setattr(report_plots, "_save", lambda fig, path: path.write_bytes(PNG_MAGIC))
    seed(store)
    (tmp_path / "latency_vs_flops.png").write_bytes(b"stale")
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, tmp_path, fmt="html", device_kinds=[GPU])
        with pytest.raises(NotFoundError, match="no device kind 'NVIDIA Nope'"):
            rep.build_report(session, tmp_path, device_kinds=["NVIDIA Nope"])
    text = path.read_text()
    assert path.name == "report.html" and text.startswith("<!DOCTYPE html>")
    assert '<img src="batch_latency.png" alt="Latency against batch size">' in text
    assert "<li>no CPU measurements: CPU latency column omitted</li>" in text
    assert "<td>mlp-b4</td>" in text and "<th>latency (ms)</th>" in text
    assert "<td>16,000</td>" in text and "All rows: <code>models.csv</code>." in text
    # The failed second run left the first one's files: every plot there, the stale one replaced.
    for name in rep.PLOT_FILES:
        assert png_ok(tmp_path / name), name


def test_empty_database(store: Store, tmp_path: Path) -> None:
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, tmp_path, now=NOW)
    text = path.read_text()
    assert "0 models in the database, 0 with a measured full-model run" in text
    assert "- no device kind registered yet" in text
    assert "No model has a measured full-model run on the device kinds covered" in text
    assert "no training model in the database" in text
    # Only the chips' roofline, which needs no measurement.
    assert [p.name for p in tmp_path.glob("*.png")] == ["chips_roofline.png"]
    assert "No device kind here has measured peaks: run `opdb peaks`" in text


def test_plots_readable_with_many_points(tmp_path: Path) -> None:
    n = 36
    points = pd.DataFrame(
        {
            "model": [f"model-{i}" for i in range(n)],
            "device_kind": [CPU if i % 2 else GPU for i in range(n)],
            "mode": ["inference"] * (n - 4) + ["training"] * 4,
            "step_flops": [10 ** (6 + i / 6) for i in range(n)],
            "params": [0] + [10 ** (4 + i / 8) for i in range(1, n)],
            "latency_s": [1e-4 * 1.2**i for i in range(n)],
        }
    )
    assert rep.plot_complexity(points, "params", "p", "t", tmp_path / "p.png") == n - 1
    batch = pd.DataFrame(
        {
            "family": [f"family-{i // 4}" for i in range(n)],
            "family_name": [f"f{i // 4}" for i in range(n)],
            "device_kind": [CPU] * n,
            "batch_size": [2 ** (i % 4) for i in range(n)],
            "latency_s": [1e-3 * (1 + i) for i in range(n)],
        }
    )
    rep.plot_batch(batch, "latency_s", "latency (s)", "t", tmp_path / "b.png")
    assert png_ok(tmp_path / "p.png") and png_ok(tmp_path / "b.png")


def test_markdown_table_escapes() -> None:
    frame = pd.DataFrame({"a|b": ["x|y"], "c": ["line\nbreak"]})
    assert rep.markdown_table(frame) == "| a\\|b | c |\n| --- | --- |\n| x\\|y | line break |"


def test_missing_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(OperatorDBError, match=r"pip install 'operator-db\[plot\]'"):
        rep.new_figure(4, 3)


def test_cli(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    try:
        with store.transaction() as session:
            get_or_create_device_kind(session, CPU)
    finally:
        store.close()
    app = typer.Typer()
    app.command()(report)
    out = tmp_path / "r"
    args = ["--out", str(out), "--format", "html", "--device-kind", CPU, "--db", db_url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out / 'report.html'}"
    assert f"<li>{CPU} (cpu): 0 models measured</li>" in (out / "report.html").read_text()
    result = CliRunner().invoke(app, [*args[:-3], "NVIDIA Nope", "--db", db_url])
    assert isinstance(result.exception, NotFoundError)
