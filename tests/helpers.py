"""Helpers shared by tests: spec builders, table snapshots, running the CLI in-process, and
the one rule for GPU tests that cannot run (skip, or fail where ``OPDB_REQUIRE_GPU=1``)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
from sqlalchemy import event, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

from operator_db.cli.main import main
from operator_db.db.queries.tables import TABLES
from operator_db.devices.cuda import cuda_unavailable_reason
from operator_db.devices.nvml import nvml_available
from operator_db.specs import SPEC_VERSION

REPO = Path(__file__).resolve().parent.parent

EXAMPLE_SPECS = REPO / "measurement_specs"


def load_lockfile() -> ModuleType:
    """scripts/lockfile.py (a script, not a module of a package), loaded once."""
    if "lockfile" in sys.modules:
        return sys.modules["lockfile"]
    spec = importlib.util.spec_from_file_location("lockfile", REPO / "scripts" / "lockfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lockfile"] = module
    spec.loader.exec_module(module)
    return module


REQUIRE_GPU = os.environ.get("OPDB_REQUIRE_GPU", "") not in ("", "0", "false")
"""``OPDB_REQUIRE_GPU=1``: a GPU test that cannot run fails instead of skipping. Read at import,
before the autouse settings fixture of tests/conftest.py clears the ``OPDB_*`` variables."""


def skip_without_gpu(reason: str) -> NoReturn:
    """Skip a GPU test, saying ``reason``; fail with it instead where ``OPDB_REQUIRE_GPU=1``."""
    if REQUIRE_GPU:
        pytest.fail(f"{reason} (OPDB_REQUIRE_GPU is set)", pytrace=False)
    pytest.skip(reason)


def gpu_unavailable_reason() -> str | None:
    """Say why the GPU tests cannot run here (NVML, a GPU, torch with CUDA); None if they can."""
    ok, reason = nvml_available()
    if not ok:
        return reason
    return cuda_unavailable_reason()


def require_gpu() -> None:
    """Skip (or, with ``OPDB_REQUIRE_GPU=1``, fail) unless NVML sees a GPU and torch has CUDA."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        skip_without_gpu(reason)


def linear_op(inp: int = 16, out: int = 32, batch: int = 4, count: int = 1) -> dict[str, Any]:
    """Return a Linear operator entry (a spec's ``operators[i]``) with its FLOPs and bytes."""
    return {
        "op": "torch.nn.Linear",
        "form": "module",
        "args": {"in_features": inp, "out_features": out, "bias": True},
        "dtype": "float32",
        "inputs": [{"shape": [batch, inp], "dtype": "float32"}],
        "outputs": [{"shape": [batch, out], "dtype": "float32"}],
        "count": count,
        "flops": 2 * batch * inp * out,
        "flop_rule": "matmul",
        "bytes": 4 * (batch * inp + inp * out + out + batch * out),
        "params": inp * out + out,
        "locations": ["fc"],
    }


def relu_op(shape: list[int], count: int = 1) -> dict[str, Any]:
    """Return a ReLU operator entry on a tensor of ``shape``."""
    numel = 1
    for d in shape:
        numel *= d
    return {
        "op": "torch.nn.ReLU",
        "form": "module",
        "inputs": [{"shape": shape, "dtype": "float32"}],
        "outputs": [{"shape": shape, "dtype": "float32"}],
        "count": count,
        "flops": numel,
        "flop_rule": "elementwise",
        "bytes": 8 * numel,
    }


def spec_dict(
    name: str = "toy", operators: list[dict[str, Any]] | None = None, mode: str = "inference"
) -> dict[str, Any]:
    """Return a valid spec as a dict."""
    return {
        "spec_version": SPEC_VERSION,
        "model": {
            "name": name,
            "reference": "module:operator_db.examples:mlp",
            "mode": mode,
            "inputs": [{"name": "x", "shape": [4, 16], "dtype": "float32"}],
        },
        "operators": operators if operators is not None else [linear_op(), relu_op([4, 32], 2)],
    }


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Return every row of every table (alembic's own included), ordered, to compare states."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for table in TABLES:
            t = table.__table__
            pk = list(t.primary_key.columns)
            out[t.name] = [tuple(r) for r in conn.execute(select(t).order_by(*pk))]
        if inspect(conn).has_table("alembic_version"):
            out["alembic_version"] = [
                tuple(r) for r in conn.execute(text("SELECT version_num FROM alembic_version"))
            ]
    return out


@dataclass
class CliResult:
    """What one ``opdb`` run printed and returned."""

    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    """Run ``opdb ARGS`` in-process and capture its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def result_row(**fields: Any) -> dict[str, Any]:
    """Return the required columns of a measurement or full-model run, overridden by ``fields``."""
    row: dict[str, Any] = {
        "dtype": "float32",
        "calls_per_block": 1,
        "blocks": 1,
        "time_median_s": 1e-3,
        "time_mean_s": 1e-3,
        "time_iqr_s": 0.0,
        "time_cv": 0.0,
    }
    row.update(fields)
    return row


def measure_everything(db_url: str, kind_name: str) -> None:
    """Store a 1 ms eager result of every configuration on ``kind_name`` and one host."""
    from operator_db.db import queries
    from operator_db.db.models import Measurement, OperatorConfig
    from operator_db.db.store import Store

    with Store.open(db_url) as store, store.transaction() as session:
        kind = queries.get_or_create_device_kind(session, kind_name, "gpu")
        host = queries.get_or_create_host(session, f"host-of-{kind_name}", "GPU-1", kind.id)
        for config_id in session.scalars(select(OperatorConfig.id)):
            session.add(
                Measurement(
                    config_id=config_id, device_kind_id=kind.id, host_id=host.id, **result_row()
                )
            )


@contextmanager
def sqlite_size_capped(engine: Engine | None = None) -> Iterator[None]:
    """While open, SQLite databases cannot grow: a write that needs a new page fails as on a full
    disk ("database or disk is full", SQLITE_FULL) and reads go on.

    Each connection's ``PRAGMA max_page_count`` (it is not stored in the file) is set to the
    database's size when the connection opens: ``engine``'s connections (its pool is emptied
    first), or with None those of every engine opened meanwhile (a CLI command's own).
    """

    def cap(dbapi_conn: Any, _record: Any) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
            dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")

    target: Any = engine if engine is not None else Pool
    if engine is not None:
        engine.dispose()
    event.listen(target, "connect", cap)
    try:
        yield
    finally:
        event.remove(target, "connect", cap)
        if engine is not None:
            engine.dispose()
