"""Shared fixtures: one fresh, migrated database per test, on SQLite and on PostgreSQL.

Each backend's schema is built once per session by the migrations (never ``create_all``) into a
template: a SQLite file that is copied, a PostgreSQL database cloned with ``CREATE DATABASE ...
TEMPLATE``. Every test then gets its own copy, so tests can commit and stay isolated.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from operator_db.config import get_settings
from operator_db.db.engine import make_engine
from operator_db.db.migrate import upgrade
from operator_db.db.store import Store

POSTGRES_URL = os.environ.get(
    "OPDB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("OPDB_TEST_REQUIRE_POSTGRES", "") not in ("", "0", "false")
BACKENDS = ["sqlite", "postgresql"]
_PG_PREFIX = "opdb_test_"


def _admin_engine():  # type: ignore[no-untyped-def]
    return create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


def _owner_alive(database: str) -> bool:
    """Whether the test process that created ``database`` (its pid is in the name) still runs.

    Concurrent test runs share the server: only databases of dead runs are removed.
    """
    pid = database.removeprefix(_PG_PREFIX).split("_", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _postgres_unavailable() -> str | None:
    try:
        engine = _admin_engine()
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001
        return f"PostgreSQL at {make_url(POSTGRES_URL).render_as_string()} unavailable: {exc}"
    return None


@pytest.fixture(scope="session", autouse=True)
def _transformers_logs_to_the_session_stream() -> None:
    """Configure transformers' log handler before any test swaps ``sys.stderr``.

    The handler keeps the stream it first saw: first set up inside a test's ``capsys`` (a study
    harvesting a transformers model), it would later write a "Logging error" traceback through
    the closed capture into another test's output.
    """
    from transformers.utils import logging as transformers_logging

    transformers_logging.get_verbosity()


@pytest.fixture(autouse=True)
def _clean_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Keep tests away from the user's database and .env: settings read fresh, default in tmp."""
    for name in list(os.environ):
        if name.startswith("OPDB_") and not name.startswith("OPDB_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OPDB_DATABASE_URL", f"sqlite:///{tmp_path / 'default.sqlite'}")
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    with engine.connect() as conn:  # fold the WAL into the main file so a copy is complete
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    reason = _postgres_unavailable()
    if reason:
        if REQUIRE_POSTGRES:
            pytest.fail(reason + " (OPDB_TEST_REQUIRE_POSTGRES is set)")
        pytest.skip(reason)
    admin = _admin_engine()
    with admin.connect() as conn:  # leftovers of interrupted earlier runs on this host
        names = conn.execute(
            text("SELECT datname FROM pg_database WHERE datname LIKE :p"), {"p": _PG_PREFIX + "%"}
        ).scalars()
        for name in list(names):
            if not _owner_alive(name):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    name = f"{_PG_PREFIX}{os.getpid()}_template_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _fresh_postgres(template: str | None) -> Iterator[str]:
    reason = _postgres_unavailable()
    if reason:
        if REQUIRE_POSTGRES:
            pytest.fail(reason + " (OPDB_TEST_REQUIRE_POSTGRES is set)")
        pytest.skip(reason)
    admin = _admin_engine()
    name = f"{_PG_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        suffix = f' TEMPLATE "{template}"' if template else ""
        conn.execute(text(f'CREATE DATABASE "{name}"{suffix}'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test: every test using a database runs once per backend."""
    return str(request.param)


@pytest.fixture
def empty_db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """URL of a new, empty database (no schema) on the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite'}"
    else:
        yield from _fresh_postgres(None)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a new database migrated to head, private to this test."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "test.sqlite"
        shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
    else:
        yield from _fresh_postgres(request.getfixturevalue("postgres_template"))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """The test's database, opened."""
    opened = Store.open(db_url)
    yield opened
    opened.close()
