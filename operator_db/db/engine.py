"""Engine and session factories; nothing is connected or created until asked."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from operator_db.errors import ConnectionLostError, DatabaseError, DiskFullError

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another process's lock before failing, in milliseconds."""


POOL_SIZE = 5
"""Connections an engine keeps open (PostgreSQL, a SQLite file)."""
POOL_OVERFLOW = 10
"""Connections it may open beyond ``POOL_SIZE`` at once; past both, a checkout waits (30 s)."""

SQLITE_IMMEDIATE = "opdb_sqlite_immediate"
"""Execution option: begin SQLite transactions with BEGIN IMMEDIATE (ignored elsewhere)."""


def safe_url(url: str) -> str:
    """Return ``url`` with any password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given, it holds no secret
        return url


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own transaction handling defers BEGIN and breaks SAVEPOINTs; the documented
    # recipe turns it off and emits BEGIN ourselves (see the "begin" listener below).
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for ``url``; a SQLite file's directory is created if missing.

    Raises:
        DatabaseError: the URL is malformed or names a driver that is not installed.
    """
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises ArgumentError and ValueError
        raise DatabaseError(f"invalid database URL {url!r}: {exc}") from None
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs.update(pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs.update(pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    try:
        engine = create_engine(parsed, **kwargs)
    except Exception as exc:  # noqa: BLE001 - e.g. NoSuchModuleError, a missing DB driver
        raise DatabaseError(f"cannot use database {safe_url(url)}: {exc}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # A write transaction takes the write lock up front (BEGIN IMMEDIATE): a deferred one
            # that reads first and writes later fails at once with "database is locked" when
            # another process wrote meanwhile, because waiting could deadlock.
            immediate = conn.get_execution_options().get(SQLITE_IMMEDIATE, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def make_sessionmaker(engine: Engine, *, write: bool = True) -> sessionmaker[Session]:
    """Return a session factory bound to ``engine`` (objects stay readable after commit).

    ``write`` sessions take SQLite's write lock when they begin, so concurrent writers queue on
    the busy timeout instead of failing; read sessions never block (WAL).
    """
    bound = engine.execution_options(**{SQLITE_IMMEDIATE: True}) if write else engine
    return sessionmaker(bind=bound, expire_on_commit=False)


SQLITE_FULL = 13
"""SQLite's result code for "database or disk is full" (a size cap, ``max_page_count``, too)."""
POSTGRES_DISK_FULL = "53100"
"""PostgreSQL's SQLSTATE ``disk_full`` ("could not extend file …: No space left on device")."""


def describe_db_error(exc: DBAPIError, url: str) -> DatabaseError:
    """Translate a driver error into a one-line :class:`DatabaseError` naming the database.

    A full disk is a :class:`DiskFullError` (the database reads fine; only writes fail), a
    dropped or refused connection "is unavailable", any other refusal "refused the operation".
    """
    original = getattr(exc, "orig", None) or exc
    first = str(original).strip().splitlines()[0] if str(original).strip() else type(exc).__name__
    if _is_disk_full(original):
        sqlite = url.startswith("sqlite")
        return DiskFullError(
            f"database {safe_url(url)}: the disk is full ({first}{_free_space(url)}): "
            f"nothing of the transaction was written; free space"
            f"{'' if sqlite else ' on the database server'} and retry"
        )
    if exc.connection_invalidated:  # SQLAlchemy's reading: the connection is gone
        return ConnectionLostError(f"database {safe_url(url)} ended the connection: {first}")
    if isinstance(exc, OperationalError):
        return DatabaseError(f"database {safe_url(url)} is unavailable: {first}")
    return DatabaseError(f"database {safe_url(url)} refused the operation: {first}")


def _is_disk_full(original: BaseException) -> bool:
    """Whether a driver's error says the disk is full (sqlite3 or psycopg; neither imported)."""
    code = getattr(original, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == SQLITE_FULL  # the primary code under an extended one
    return getattr(original, "sqlstate", None) == POSTGRES_DISK_FULL


def _free_space(url: str) -> str:
    """``"; 1.2 GiB free in DIR"`` for a SQLite file's directory; empty where not known."""
    try:
        parsed = make_url(url)
        database = parsed.database
        if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
            return ""
        where = Path(database.removeprefix("file:").split("?")[0]).expanduser().resolve().parent
        free = shutil.disk_usage(where).free
    except Exception:  # noqa: BLE001 - the figure is a help to the message, never its failure
        return ""
    size = f"{free / 2**30:.1f} GiB" if free >= 2**30 else f"{free / 2**20:.1f} MiB"
    return f"; {size} free in {where}"
