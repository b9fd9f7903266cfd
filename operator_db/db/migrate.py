"""Schema migrations through Alembic: upgrade, downgrade, and the revision check at start-up."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from operator_db.db.engine import describe_db_error
from operator_db.errors import DatabaseError


def migrations_dir() -> Path:
    """Return the Alembic script directory: packaged in a wheel, ``migrations/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise DatabaseError(f"migrations not found next to {here}; the installation is incomplete")


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """Build an Alembic config for a live ``connection`` (preferred) or a database ``url``."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """Return the newest revision the code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise DatabaseError("no migration revisions found")
    return head


def current_revision(engine: Engine) -> str | None:
    """Return the revision the database is at (None for an empty database).

    Raises:
        DatabaseError: the database cannot be reached.
    """
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        raise describe_db_error(exc, str(engine.url)) from None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to ``revision`` (default: the newest).

    Raises:
        DatabaseError: the database cannot be reached or the migration failed.
    """
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
    raise DatabaseError(
        f"database {engine.url.render_as_string(hide_password=True)} is {state}, "
        f"the code expects {head}: run `opdb db upgrade`"
    )
