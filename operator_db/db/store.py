"""The store: an engine and a session factory for one database URL, migrated before use."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from operator_db.config import Settings
from operator_db.db.engine import describe_db_error, make_engine, make_sessionmaker, safe_url
from operator_db.db.migrate import ensure_current

log = logging.getLogger(__name__)


@dataclass
class Store:
    """A database opened for use: an engine, its session factory, and the URL (for messages).

    A context manager: ``with Store.open(url) as store:`` closes it when the block ends.
    """

    engine: Engine
    sessions: sessionmaker[Session]
    url: str
    read_sessions: sessionmaker[Session] | None = None
    auto_upgrade_sqlite: bool = True
    """Whether :meth:`ensure_current` brings a SQLite file's schema up to date."""

    @classmethod
    def open(
        cls, url: str, *, migrate: bool = True, auto_upgrade_sqlite: bool = True, echo: bool = False
    ) -> Store:
        """Open ``url``; with ``migrate``, check (or, for SQLite, bring up) the schema revision.

        Raises:
            DatabaseError: unreachable, or at a revision the code cannot use.
        """
        engine = make_engine(url, echo=echo)
        store = cls(
            engine,
            make_sessionmaker(engine),
            url,
            make_sessionmaker(engine, write=False),
            auto_upgrade_sqlite,
        )
        if migrate:
            try:
                store.ensure_current()
            except BaseException:
                engine.dispose()
                raise
        return store

    def ensure_current(self) -> None:
        """Check that the schema is at this code's revision, as :meth:`open` does unless told not.

        A SQLite file is brought there where ``auto_upgrade_sqlite``.

        Raises:
            DatabaseError: unreachable (retryable), or at a revision the code cannot use
                (:class:`~operator_db.errors.SchemaMismatchError`).
        """
        ensure_current(self.engine, auto_upgrade_sqlite=self.auto_upgrade_sqlite)

    @classmethod
    def from_settings(cls, settings: Settings, *, migrate: bool = True) -> Store:
        """Open the database the settings name."""
        return cls.open(
            settings.database_url,
            migrate=migrate,
            auto_upgrade_sqlite=settings.auto_upgrade_sqlite,
            echo=settings.sql_echo,
        )

    @contextmanager
    def transaction(self, *, read_only: bool = False) -> Iterator[Session]:
        """Yield a session that commits when the block ends, or rolls everything back.

        Keep write transactions short: on SQLite one holds the database's write lock from its
        first statement. ``read_only`` transactions take no lock. Rolling back or closing once the
        transaction has ended does not raise (a failure is logged): see :meth:`_end`.

        Raises:
            DatabaseError: the database failed; nothing of the block was kept.
            DiskFullError: the database's disk is full; nothing of the block was kept.
        """
        factory = self.read_sessions if read_only and self.read_sessions else self.sessions
        session = factory()
        try:
            yield session
            session.commit()
        except DBAPIError as exc:
            self._end(session.rollback, "rolling back")
            raise describe_db_error(exc, self.url) from None
        except BaseException:
            self._end(session.rollback, "rolling back")
            raise
        finally:
            self._end(session.close, "closing")

    def _end(self, step: Callable[[], None], doing: str) -> None:
        """Roll back or close a session whose transaction has ended; log a failure, never raise.

        Called after a commit (nothing is left to lose) or on the way out with another error
        (which must reach the caller, not this one): a dropped connection fails here too, and the
        server rolls back whatever it had of the transaction when the connection goes.
        """
        try:
            step()
        except DBAPIError as exc:
            log.warning("%s a session failed: %s", doing, describe_db_error(exc, self.url))

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def display_url(self) -> str:
        """The URL with its password masked."""
        return safe_url(self.url)
