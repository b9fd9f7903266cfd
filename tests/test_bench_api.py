"""bench/bench_api.py end to end on SQLite, tiny: a fill, two served workers, a writer, clients.

The figures are the machine's; what is checked is that every part ran and nothing failed: every
answer a 200, the writer committing (and removing its rows afterwards); and that a filled database
is reused while its parameters match.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def _bench(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    args = ["--db", "sqlite", "--models", "3", "--measurements", "1000", "--clients", "4"]
    args += ["--duration", "2", "--warmup", "1", "--rates", "0", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_api.py"), *args, *extra],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done, json.loads(out.read_text())


def test_a_tiny_run_answers_every_request_while_the_writer_commits(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done, figures = _bench(tmp_path, "--cache-dir", str(cache))
    [row] = figures["rows"]
    assert (row["db"], row["models"], row["measurements"], row["rate"]) == ("sqlite", 3, 1000, 0)
    assert (
        row["requests"] > 0 and row["errors"] == 0 and row["statuses"] == {"200": row["requests"]}
    )
    assert row["writer"]["commits"] > 0 and row["writer"]["failures"] == 0
    assert "| sqlite | closed |" in done.stdout
    assert "filled in" in done.stderr
    [database] = cache.glob("api-*.sqlite")
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:  # the writer removed what it wrote
        assert conn.scalar(text("SELECT count(*) FROM measurements")) == 1000
    engine.dispose()


def test_a_filled_database_is_reused_when_its_parameters_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from api_fill import FillParams, sqlite_database

    first = sqlite_database(tmp_path, FillParams(2, 100), refill=False)
    assert first[1] is True
    assert sqlite_database(tmp_path, FillParams(2, 100), refill=False) == (first[0], False)
    assert sqlite_database(tmp_path, FillParams(2, 100), refill=True) == (first[0], True)
    other = sqlite_database(tmp_path, FillParams(2, 101), refill=False)
    assert other[1] is True and other[0] != first[0]
