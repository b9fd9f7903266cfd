"""The report: files written, tables and image links in it, an empty database, many points."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from operator_db import report as rep
from operator_db.cli.report import report
from operator_db.db.ingest import ingest_specs
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.errors import NotFoundError, OperatorDBError
from operator_db.report import plots as report_plots
from operator_db.roofline.record import store_attained_roofs
from operator_db.specs import parse_spec
from tests.helpers import spec_dict
from tests.study.study_data import CPU as STUDY_CPU
from tests.study.study_data import FAILED, seed_study
from tests.study.study_data import GPU as STUDY_GPU
from tests.study.test_analysis import CPU, GPU, seed

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
    # The estimates as `opdb estimate` composes them, against the same run (no replay stored:
    # the operators looped alone, as the measured-models table has them).
    estimates = text.split("## Estimates against the measured models\n\n", 1)[1]
    assert f"| mlp-b4 | {CPU} | 1.8 | 2 | -10.0 % |  | -10.0 % | looped alone |" in estimates
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


def test_both_formats_from_one_computation(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`opdb demo` and `opdb study` write md and html: the studies and plots are made once."""
    from matplotlib.figure import Figure

    seed(store)
    saved: list[str] = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, path, **kw: (saved.append(str(path)), save(fig, path, **kw))
    )
    with store.transaction(read_only=True) as session:
        md = rep.build_report(session, tmp_path / "one", now=NOW)
        html = rep.build_report(session, tmp_path / "one", fmt="html", now=NOW)
        alone = len(saved)
        both = rep.build_reports(session, tmp_path / "both", now=NOW)
        with pytest.raises(OperatorDBError, match="unknown report format"):
            rep.build_reports(session, tmp_path / "x", formats=("md", "pdf"))  # type: ignore[arg-type]
    assert both == [tmp_path / "both" / "report.md", tmp_path / "both" / "report.html"]
    assert alone > 0 and len(saved) - alone == alone // 2  # each plot drawn once, not twice
    for one, two in zip((md, html), both, strict=True):
        assert two.read_text() == one.read_text().replace(
            str(tmp_path / "one"), str(tmp_path / "both")
        )


def test_html_report_for_one_kind(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Drawing is covered above; here a stub PNG keeps the test fast.
    monkeypatch.setattr(report_plots, "save_png", lambda fig, path: path.write_bytes(PNG_MAGIC))
    seed(store)
    (tmp_path / "latency_vs_flops.png").write_bytes(b"stale")
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, tmp_path, fmt="html", device_kinds=[GPU])
        with pytest.raises(NotFoundError, match="no device kind 'NVIDIA Nope'"):
            rep.build_report(session, tmp_path, device_kinds=["NVIDIA Nope"])
    text = path.read_text()
    assert path.name == "report.html" and text.startswith("<!DOCTYPE html>")
    assert '<img src="batch_latency.png" alt="Latency against batch size, per device kind">' in text
    assert "<li>no CPU measurements: CPU latency column omitted</li>" in text
    assert "<td>mlp-b4</td>" in text and "<th>latency (ms)</th>" in text
    assert "<td>16,000</td>" in text and "All rows: <code>models.csv</code>." in text
    # The failed second run left the first one's files: every plot there, the stale one replaced;
    # but the forward:backward of runs: toy-train has no run on the GPU.
    for name in rep.PLOT_FILES:
        assert png_ok(tmp_path / name) == (name != "forward_backward_runs.png"), name
    assert "<li>no training spec has a full-model run: harvest" in text


def test_empty_database(store: Store, tmp_path: Path) -> None:
    with store.transaction(read_only=True) as session:
        path = rep.build_report(session, tmp_path, now=NOW)
    text = path.read_text()
    assert "0 models in the database, 0 with a measured full-model run" in text
    assert "- no device kind registered yet" in text
    # Every section says why it is empty.
    for heading, why in [
        ("Run matrix", "No model or no device kind in the study: nothing is covered yet."),
        ("Measured models", "No model has a measured full-model run on the device kinds"),
        ("Estimates against the measured models", "No model has a measured full-model run"),
        ("Complexity", "No model in the study: no complexity to show."),
        ("Latency against FLOPs and parameters", "No model has a measured full-model run"),
        ("Rank correlation", "- no model has a measured full-model run: nothing to correlate"),
        ("Batch size", "No model family has full-model runs at two or more batch sizes"),
        ("Achieved performance on the device roofline", "no point to place on a roofline"),
        ("Configurations on the device roofs", "no configuration to place on a roofline"),
        ("Forward and backward from whole-model runs", "- no training spec has a full-model run"),
        (
            "Forward and backward per configuration (training specs)",
            "- no training model in the database",
        ),
        ("Layer types: shares of latency, FLOPs and memory", "no model in the study"),
        ("Predictions", "No predictor is trained for these device kinds"),
        ("Measured FLOPs and bytes (Nsight Compute)", "No configuration of the measured models"),
        ("Chips", "No device kind here has measured peaks: run `opdb peaks`"),
    ]:
        section = text.split(f"## {heading}\n\n", 1)[1].split("\n## ", 1)[0]
        assert why in section, heading
    # Only the chips' roofline, which needs no measurement.
    assert [p.name for p in tmp_path.glob("*.png")] == ["chips_roofline.png"]


def test_study_report_fills_every_section(store: Store, tmp_path: Path) -> None:
    names = seed_study(store, families=4)
    with store.transaction() as session:
        get_or_create_device_kind(session, "fake:Unused", "fake")  # not in the study
        ingest_specs(session, [parse_spec(spec_dict("outsider"), "outsider.yaml")])
        # The GPU's attained L2 roof, found once as `opdb peaks` or an import does.
        store_attained_roofs(session, get_or_create_device_kind(session, STUDY_GPU))
    out = tmp_path / "md"
    with store.transaction(read_only=True) as session:
        path = rep.build_report(
            session, out, models=names, device_kinds=[STUDY_GPU, STUDY_CPU], source="db", now=NOW
        )
        html = rep.build_report(session, tmp_path / "html", fmt="html", models=names)
        with pytest.raises(NotFoundError, match="no model named 'nope'"):
            rep.build_report(session, tmp_path / "x", models=[*names, "nope"])
    text = path.read_text()
    n = len(names)
    assert f"{n} models in the study, {n} with a measured full-model run" in text
    assert "outsider" not in text  # a study reports its own models
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "Run matrix",
        "Measured models",
        "Estimates against the measured models",
        "LLMs: time per token against generate()",
        "Complexity",
        "Latency against FLOPs and parameters",
        "Rank correlation",
        "Batch size",
        "Achieved performance on the device roofline",
        "Configurations on the device roofs",
        "Forward and backward from whole-model runs",
        "Forward and backward per configuration (training specs)",
        "Layer types: shares of latency, FLOPs and memory",
        "Predictions",
        "Measured FLOPs and bytes (Nsight Compute)",
        "Chips",
    ]
    # The run matrix: one table per kind, rows family and mode, columns batch sizes.
    assert f"**{STUDY_CPU}**\n\n| family | mode | b1 | b8 | b32 |" in text
    assert "| tf0 | inference | " in text and " | ✗ failed |" in text
    assert "| cnn0 | training |  | — | — |" in text  # no b1 training spec; not run on the CPU
    assert f"- tf1-b32 on {STUDY_CPU}: {FAILED}" in text
    # Each measured section has its figure and no "why empty" sentence.
    for phrase in ("No model", "no point", "No pie", "nothing to"):
        assert phrase not in text, phrase
    assert "a coefficient needs at least" not in text and "|  | CPU latency | GPU latency |" in text
    for name in rep.PLOT_FILES:
        assert png_ok(out / name), name
        assert f"]({name})" in text
    rooflines = sorted(p.name for p in out.glob("roofline_*.png"))
    assert rooflines == ["roofline_00_nvidia-h100-80gb-hbm3.png", "roofline_01_cpu-study-cpu.png"]
    layers = sorted(p.name for p in out.glob("layers_*.png"))
    assert layers == [
        "layers_00_cnn0.png",
        "layers_01_cnn1.png",
        "layers_02_tf0.png",
        "layers_03_tf1.png",
    ]
    configs = sorted(p.name for p in out.glob("configs_roofline_*.png"))
    assert configs == ["configs_roofline_00_nvidia-h100-80gb-hbm3.png"]  # none on the CPU
    for name in [*rooflines, *layers, *configs]:
        assert png_ok(out / name) and f"]({name})" in text
    # Every point on a roofline is counted under the roof that explains it.
    roofs = text.split("## Configurations on the device roofs\n\n", 1)[1].split("\n## ", 1)[0]
    assert (
        "| device kind | configurations | DRAM-bound | cache-explained | compute-bound |" in roofs
    )
    assert (
        "- By roof: 68 DRAM-bound, 0 cache-explained, 17 compute-bound, 0 algorithm-explained, "
        "0 unexplained." in roofs
    )
    assert "no L2 roof: the fastest of 80 L2-resident configurations" in roofs  # H100: 50 MiB
    assert "roof, spec float32 peak and bandwidth" not in text  # drawn in the PNG, not in text
    assert f"No peaks known for {STUDY_CPU}: the points are drawn without roofs." in text
    assert f"- forward latency: measured on {STUDY_GPU}" in text
    assert f"- forward latency: roofline bound on {STUDY_GPU}" in text
    # The fwd:bwd of runs: one row per training spec with its twin on the STUDY_GPU.
    fb_runs = pd.read_csv(out / "forward_backward_runs.csv")
    assert len(fb_runs) == 4 * 2 and set(fb_runs["device_kind"]) == {STUDY_GPU}
    shares = pd.read_csv(out / "layer_shares.csv")
    sums = shares.groupby(["family_name", "pass", "quantity"])["share"].sum()
    assert sums.to_numpy() == pytest.approx([1.0] * 24)
    for name in rep.TABLE_FILES:
        assert (out / name).is_file(), name
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<h2>Layer types: shares of latency, FLOPs and memory</h2>" in page
    assert '<img src="complexity.png"' in page and "<td>✗ failed</td>" in page


def test_plots_readable_with_many_points(tmp_path: Path) -> None:
    n = 36
    points = pd.DataFrame(
        {
            "model": [f"model-{i}" for i in range(n)],
            "family_name": [f"family-{i // 3}" for i in range(n)],
            "device_kind": [CPU if i % 2 else GPU for i in range(n)],
            "mode": ["inference"] * (n - 4) + ["training"] * 4,
            "batch_size": [2 ** (i % 3) for i in range(n)],
            "step_flops": [10 ** (6 + i / 6) for i in range(n)],
            "params": [0] + [10 ** (4 + i / 8) for i in range(1, n)],
            "latency_s": [1e-4 * 1.2**i for i in range(n)],
        }
    )
    assert rep.plot_latency_scatter(points, "params", "p", tmp_path / "p.png") == n - 1
    batch = pd.DataFrame(
        {
            "base_family_name": [f"f{i // 4}" for i in range(n)],
            "mode": ["inference"] * n,
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
    result = CliRunner().invoke(app, [*args, "--model", "nope"])
    assert isinstance(result.exception, NotFoundError)
    assert str(result.exception) == "no model named 'nope' in the database"
