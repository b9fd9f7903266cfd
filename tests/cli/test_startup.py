"""``opdb`` starts at once: a command imports only the libraries its work needs (issue 13).

Each command runs in a fresh interpreter (the test process has long imported torch) through
``main()``, the typer app in-process without standalone mode; the runner then writes which of the
heavy libraries ended up in ``sys.modules``. ``bench/bench_startup.py`` times the same commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from operator_db.config import FAST_FAKE_MEASURE
from tests.helpers import EXAMPLE_SPECS, REPO, run_cli

HEAVY = (
    "torch",
    "transformers",
    "torchvision",
    "timm",
    "matplotlib",
    "pandas",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "uvicorn",
    "pynvml",
    "nvitop",
    "sklearn",
)
"""Libraries that take a tenth of a second (torch: seconds) to import, or open a device."""

RUNNER = """
import json, sys
from operator_db.cli.main import main
code = main(sys.argv[2:])
heavy = sorted(name for name in json.loads(sys.argv[1]) if name in sys.modules)
print("\\n@@modules " + json.dumps({"code": code, "heavy": heavy}))
"""


def python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c CODE ARGS`` on this checkout (the test's settings in its environment)."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def run_fresh(*args: str) -> tuple[int, list[str], str]:
    """Run ``opdb ARGS`` in a new interpreter; return its exit code, heavy modules and output."""
    done = python(RUNNER, json.dumps(HEAVY), *args)
    out, marker, tail = done.stdout.rpartition("@@modules ")
    assert marker, f"opdb {' '.join(args)} did not finish:\n{done.stdout}\n{done.stderr}"
    result = json.loads(tail)
    return result["code"], result["heavy"], out + done.stderr


@pytest.fixture
def measured(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The default SQLite database with mlp-small-b8 ingested and measured on the fake device."""
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    assert run_cli(capsys, "ingest", str(EXAMPLE_SPECS / "mlp-small-b8.yaml")).code == 0
    done = run_cli(capsys, "measure", "mlp-small-b8", "--device", "fake")
    assert done.code == 0, done.err
    return "mlp-small-b8"


def test_help_imports_no_library() -> None:
    code, heavy, out = run_fresh("--help")
    assert code == 0
    assert heavy == []
    for command in ("harvest", "ingest", "estimate", "worker", "jobs", "serve", "doctor"):
        assert command in out


def test_database_commands_import_neither_torch_nor_pandas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli(capsys, "ingest", str(EXAMPLE_SPECS / "mlp-small-b8.yaml")).code == 0
    code, heavy, out = run_fresh("models", "list")
    assert code == 0 and "mlp-small-b8" in out
    assert heavy == ["sqlalchemy"]
    code, heavy, out = run_fresh("jobs")
    assert code == 0 and "device kind" in out
    assert heavy == ["sqlalchemy"]


def test_estimate_imports_no_torch(measured: str) -> None:
    code, heavy, out = run_fresh("estimate", measured)
    assert code == 0, out
    assert "100.0% of operator calls measured" in out
    assert heavy == ["sqlalchemy"]


def test_a_driver_error_is_still_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # main() recognises SQLAlchemy's DBAPIError without importing SQLAlchemy itself.
    def unreachable(db: str | None, *, migrate: bool = True) -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused\nmore"))

    monkeypatch.setattr("operator_db.cli.models.open_store", unreachable)
    monkeypatch.setenv("OPDB_DATABASE_URL", "postgresql+psycopg://me:secret@nowhere/db")
    result = run_cli(capsys, "models", "list")
    assert result.code == 1
    assert result.err == (
        "error: database postgresql+psycopg://me:***@nowhere/db is unavailable: "
        "connection refused\n"
    )


def test_harvest_of_a_module_imports_torch_only(tmp_path: Path) -> None:
    spec = tmp_path / "mlp.yaml"
    code, heavy, out = run_fresh(
        "harvest", "module:operator_db.examples:mlp", "-i", "8x784", "-o", str(spec)
    )
    assert code == 0, out
    assert spec.stat().st_size > 0
    assert set(heavy) - {"pynvml"} == {"torch"}  # torch.cuda imports pynvml where it is installed


def test_library_layers_below_measuring_import_no_torch() -> None:
    """config, errors, specs, db and estimate: what the estimate commands run on."""
    probe = """
import importlib, pkgutil, sys
import operator_db.db, operator_db.estimate, operator_db.specs
names = ["operator_db.config", "operator_db.errors"]
for pkg in (operator_db.db, operator_db.estimate, operator_db.specs):
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(len(names), sorted(m for m in ("torch", "matplotlib", "transformers") if m in sys.modules))
"""
    done = python(probe)
    assert done.returncode == 0, done.stderr
    count, _, found = done.stdout.strip().partition(" ")
    assert int(count) > 20
    assert found == "[]"
