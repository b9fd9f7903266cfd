"""Schema migrations through Alembic: upgrade, downgrade, and the revision check at start-up.

The check that every command makes (:func:`ensure_current`) reads the revision ids of the scripts
and the database's ``alembic_version`` row without Alembic, whose import takes a tenth of a second;
Alembic is imported to migrate and to walk the revisions' history.
"""

from __future__ import annotations

import ast
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from operator_db.db.engine import describe_db_error, make_engine, safe_url
from operator_db.errors import DatabaseError, SchemaMismatchError

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "alembic_version"
"""Alembic's table of the database's revision (migrations/env.py keeps Alembic's default)."""


def migrations_dir() -> Path:
    """Return the Alembic script directory: packaged in a wheel, ``migrations/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise DatabaseError(f"migrations not found next to {here}; the installation is incomplete")


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """Build an Alembic config for a live ``connection`` (preferred) or a database ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _script_ids(path: Path) -> tuple[str, set[str]]:
    """Return a revision script's ``revision`` and the revisions it follows (``down_revision``)."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
            found[target.id] = ast.literal_eval(value)
    revision, down = found.get("revision"), found.get("down_revision")
    if not isinstance(revision, str):
        raise DatabaseError(f"{path}: no revision id; the installation is broken")
    downs = {down} if isinstance(down, str) else set(down) if isinstance(down, tuple) else set()
    return revision, downs


_SCRIPTS: dict[tuple[Path, int, int], tuple[str, set[str]]] = {}
"""Each script's ids by (path, size, mtime ns): parsed once, parsed again where it changed."""
_SCRIPTS_LOCK = threading.Lock()


def _scripts(paths: list[Path]) -> list[tuple[str, set[str]]]:
    """Return each script's ids, parsing only those not seen as they are (thread-safe)."""
    with _SCRIPTS_LOCK:  # /health asks from many threads at once
        found = []
        for path in paths:
            stat = path.stat()
            key = (path, stat.st_size, stat.st_mtime_ns)
            if key not in _SCRIPTS:
                _SCRIPTS[key] = _script_ids(path)
            found.append(_SCRIPTS[key])
        return found


def head_revision() -> str:
    """Return the newest revision the code knows: the one no other script follows.

    The scripts are parsed once each (``_scripts``): a call costs a directory listing.

    Raises:
        DatabaseError: no scripts, or several heads (a branch to merge).
    """
    paths = sorted((migrations_dir() / "versions").glob("[!_]*.py"))
    scripts = _scripts(paths)
    followed = set().union(*(downs for _, downs in scripts))
    heads = sorted(revision for revision, _ in scripts if revision not in followed)
    if not heads:
        raise DatabaseError("no migration revisions found")
    if len(heads) > 1:
        raise DatabaseError(f"the migrations have several heads ({', '.join(heads)}): merge them")
    return heads[0]


def current_revision(bind: Engine | Connection) -> str | None:
    """Return the revision the database is at (None for an empty database).

    ``bind`` is an engine (a connection of its own) or a connection, read in its transaction
    (which may hold locks on the tables that another connection would wait for).

    Raises:
        DatabaseError: the database cannot be reached, or holds several revisions.
    """
    url = str(bind.engine.url)
    try:
        with bind.connect() if isinstance(bind, Engine) else nullcontext(bind) as conn:
            if not inspect(conn).has_table(VERSION_TABLE):
                return None
            rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    except DBAPIError as exc:
        raise describe_db_error(exc, url) from None
    if len(rows) > 1:
        raise SchemaMismatchError(
            f"database {safe_url(url)} is at several revisions "
            f"({', '.join(sorted(rows))}): migrate it with `alembic`"
        )
    return rows[0] if rows else None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to ``revision`` (default: the newest).

    Raises:
        DatabaseError: the database cannot be reached or the migration failed.
    """
    from alembic import command

    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), revision)
    except DBAPIError as exc:
        raise describe_db_error(exc, str(engine.url)) from None


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database down to ``revision`` (``base`` drops every table).

    Raises:
        DatabaseError: the database cannot be reached or the migration failed.
    """
    from alembic import command

    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), revision)
    except DBAPIError as exc:
        raise describe_db_error(exc, str(engine.url)) from None


def ensure_current(engine: Engine, *, auto_upgrade_sqlite: bool = True) -> None:
    """Make sure the schema is at head before use.

    A SQLite database (the embedded default) is brought up to date on first use; a shared
    PostgreSQL database is never migrated behind its admin's back.

    Raises:
        DatabaseError: the database is unreachable, or behind and not ours to migrate.
    """
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if engine.dialect.name == "sqlite" and auto_upgrade_sqlite:
        upgrade(engine)
        return
    state = "empty" if current is None else f"at revision {current}"
    raise SchemaMismatchError(
        f"database {engine.url.render_as_string(hide_password=True)} is {state}, "
        f"the code expects {head}: run `opdb db upgrade`"
    )


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database's schema stands against this code's migrations (read, never changed)."""

    url: str
    """The database URL, password masked."""
    dialect: str
    current: str | None
    """The database's revision; None for an empty database (or a missing SQLite file)."""
    head: str
    """The newest revision this code knows."""
    known: bool
    """Whether ``current`` is one of this code's revisions (False: the database is newer)."""
    exists: bool = True
    """False for a SQLite file that is not there yet (nothing was created to find out)."""

    @property
    def at_head(self) -> bool:
        """True when the database is at the code's newest revision."""
        return self.current == self.head


def known_revisions() -> set[str]:
    """Return every revision id of this code's migrations."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def schema_status(url: str) -> SchemaStatus:
    """Read the revision of the database at ``url`` and compare it with the code's head.

    Nothing is migrated; a SQLite file that does not exist is reported as missing, not created.

    Raises:
        DatabaseError: the URL is malformed, its driver is missing, or the database cannot be
            reached (one line).
    """
    head = head_revision()
    shown = safe_url(url)
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises ArgumentError and ValueError
        raise DatabaseError(f"invalid database URL {shown!r}: {exc}") from None
    dialect = parsed.get_backend_name()
    database = parsed.database
    if (
        dialect == "sqlite"
        and database
        and database != ":memory:"
        and not database.startswith("file:")
        and not Path(database).expanduser().exists()
    ):
        return SchemaStatus(shown, dialect, None, head, known=True, exists=False)
    engine = make_engine(url)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    known = current is None or current in known_revisions()
    return SchemaStatus(shown, dialect, current, head, known=known)
