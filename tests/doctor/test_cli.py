"""``opdb doctor``: the table, ``--json``, exit codes, a dead database, and a real run here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, run_cli

DEAD_DB = "postgresql+psycopg://postgres@127.0.0.1:1/none"


@pytest.fixture
def fast_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDB_FAKE_UPDATE_PERIOD_S", "0.005")


def test_table_and_exit_code_0(capsys: pytest.CaptureFixture[str], fast_fake: None) -> None:
    # 40 counter periods per window: at 10 the power sampler's misses on a loaded machine alone
    # could put counter and integrated power 7 % apart and fail the run.
    result = run_cli(capsys, "doctor", "--device", "fake", "--window", "0.2")
    assert result.code == 0, result.out + result.err
    assert result.err == ""
    for word in ("check", "status", "what to do", "idle power", "sampler overhead", "database"):
        assert word in result.out
    verdict = result.out.strip().splitlines()[-1]
    assert " warn, 0 fail in " in verdict
    assert verdict.endswith("s: measuring here is right (see the warnings)")


def test_json(capsys: pytest.CaptureFixture[str], fast_fake: None) -> None:
    # 40 counter periods a window, as above (CI: at 10, a loaded host failed a check here)
    result = run_cli(capsys, "doctor", "--device", "fake", "--window", "0.2", "--no-load", "--json")
    assert result.code == 0, result.out
    data = json.loads(result.out)
    assert (data["device"], data["ok"], data["exit_code"], data["counts"]["fail"]) == (
        "fake",
        True,
        0,
        0,
    )
    names = [c["name"] for c in data["checks"]]
    assert "agreement_idle" in names and "agreement_load" not in names  # --no-load
    idle = next(c for c in data["checks"] if c["name"] == "idle_power")
    assert idle["data"]["mean_power_w"] == pytest.approx(100.0, rel=0.05)
    assert set(data["checks"][0]) == {"name", "title", "status", "value", "action", "data"}


def test_dead_database_is_one_line_and_exit_code_1(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "doctor", "--device", "cpu", "--db", DEAD_DB, "--json")
    assert result.code == 1
    assert result.err == ""
    data = json.loads(result.out)
    database = next(c for c in data["checks"] if c["name"] == "database")
    assert database["status"] == "fail"
    assert database["value"].startswith(f"database {DEAD_DB} is unavailable: ")
    assert "\n" not in database["value"]
    assert [c["name"] for c in data["checks"] if c["status"] == "fail"] == ["database"]
    table = run_cli(capsys, "doctor", "--device", "cpu", "--db", DEAD_DB)
    assert table.code == 1
    assert "Traceback" not in table.out + table.err
    assert (
        table.out.strip()
        .splitlines()[-1]
        .endswith("measuring here would give wrong numbers (see the fail rows)")
    )


def test_a_failing_device_gives_exit_code_1(
    capsys: pytest.CaptureFixture[str], fast_fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPDB_FAKE_FAIL", "energy")
    result = run_cli(capsys, "doctor", "--device", "fake", "--json")
    assert result.code == 1
    data = json.loads(result.out)
    assert [c["name"] for c in data["checks"] if c["status"] == "fail"] == ["energy_counter"]


def test_unknown_device_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "doctor", "--device", "tpu")
    assert result.code == 1
    assert result.err.strip() == (
        "error: unknown device 'tpu'; expected auto, cpu, nvidia[:N], cuda[:N] or fake"
    )


def _energy_row_is_explained(row: dict[str, str]) -> None:
    """RAPL is readable (ok), or the row says energy is unavailable, why, and what to do."""
    if row["status"] == "ok":
        assert row["value"].startswith("readable: ")
    else:
        assert row["status"] == "warn"
        assert row["value"].startswith("energy unavailable: ")
        assert row["action"]


def test_real_run_on_this_machine(tmp_path: Path) -> None:
    """``opdb doctor --device cpu`` for real, as a subprocess: a few seconds, energy explained."""
    command = [sys.executable, "-m", "operator_db", "doctor", "--device", "cpu"]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert elapsed < 60 and data["elapsed_s"] < 30
    rows = {c["name"]: c for c in data["checks"]}
    assert rows["device"]["value"].startswith("cpu:")
    _energy_row_is_explained(rows["energy_counter"])
    assert rows["measurable"]["value"].startswith("time: yes; energy: ")
    table = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0
    assert "RAPL" in table.stdout and "can measure" in table.stdout
    assert "fail in" in table.stdout.strip().splitlines()[-1]
