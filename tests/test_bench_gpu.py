"""bench/bench_gpu.py's dry run on the fake device, end to end, with a tiny budget.

Every section must run and be written, in Markdown and JSON: ``pytest -m gpu`` (skipping here,
without ``OPDB_REQUIRE_GPU``), the checks (GPU-only ones ``skipped: no CUDA``), and the estimate,
whose cases past the budget are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

CHECKS = {
    "counter_vs_power",
    "energy_linearity",
    "eager_vs_window",
    "graph_vs_eager",
    "graph_failure",
    "oom_recovery",
}
GPU_ONLY = {"graph_vs_eager", "graph_failure", "oom_recovery"}


@pytest.mark.slow
def test_dry_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["OPDB_DATABASE_URL"] = f"sqlite:///{tmp_path / 'unused.sqlite'}"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "bench_gpu.py"),
            "--dry-run",
            "--out",
            str(out),
            "--budget-s",
            "14",
            "--pytest-args",
            "tests/measure/test_gpu.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu-validation.json").read_text())
    markdown = (out / "gpu-validation.md").read_text()
    assert done.stdout.strip() == markdown.strip()
    assert report["dry_run"] is True
    assert report["device_type"] == "fake"
    sections = report["sections"]
    assert set(sections) == {"pytest", "checks", "estimate"}
    assert all(section["wall_s"] >= 0 for section in sections.values())

    pytest_run = sections["pytest"]
    assert pytest_run["require_gpu"] == 0
    assert pytest_run["counts"]["failed"] == 0
    assert pytest_run["counts"]["passed"] + pytest_run["counts"]["skipped"] >= 1

    checks = {c["name"]: c for c in sections["checks"]["checks"]}
    assert set(checks) == CHECKS
    for name in GPU_ONLY:
        assert checks[name]["status"] == "skipped"
        assert checks[name]["reason"] == "skipped: no CUDA"
    ran = 0
    for name in CHECKS - GPU_ONLY:  # real figures of the fake device, no GPU target applied
        if checks[name]["status"] == "skipped":  # a loaded machine can spend the tiny budget
            assert checks[name]["reason"].startswith("skipped: budget"), checks[name]
            continue
        assert checks[name]["status"] == "info", checks[name]
        assert checks[name]["figures"]["verdict"] in ("pass", "fail")
        ran += 1
    assert ran >= 1 and checks["counter_vs_power"]["status"] == "info"
    windows = checks["counter_vs_power"]["figures"]
    assert len(windows["idle"]) == 2 and len(windows["matmul"]) == 2
    assert windows["matmul"][1]["calls"] == 2 * windows["matmul"][0]["calls"]

    estimate = sections["estimate"]
    cases = estimate["cases"]
    assert len(cases) == 8
    assert {c["batch"] for c in cases} == {1, 2}
    for case in cases:
        assert case["status"] in ("done", "skipped"), case
        if case["status"] == "skipped":
            assert case["reason"].startswith("budget:")
        else:
            assert case["estimate_s"] > 0 and case["measured_s"] > 0
    assert estimate["settings_overrides"]["energy"] is False

    for heading in ("**Dry run**", "## 1. `pytest -m gpu`", "## 2. Checks", "## 3. Interleaved"):
        assert heading in markdown
    assert "skipped: no CUDA" in markdown
    assert (out / "gpu-validation-pytest.log").exists()
