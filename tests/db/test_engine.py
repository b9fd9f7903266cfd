"""Translating a driver's errors: a full disk says so; a dropped connection is unavailability."""

from __future__ import annotations

from pathlib import Path

import psycopg.errors
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError, ProgrammingError

from operator_db.db.engine import describe_db_error
from operator_db.db.models import DeviceKind
from operator_db.db.store import Store
from operator_db.errors import DatabaseError, DiskFullError
from tests.helpers import sqlite_size_capped

PG = "postgresql+psycopg://postgres:secret@db/opdb"


def test_postgres_disk_full_is_a_disk_full_error() -> None:
    full = psycopg.errors.DiskFull(
        'could not extend file "base/16384/16385": No space left on device'
    )
    error = describe_db_error(OperationalError("INSERT", None, full), PG)
    assert isinstance(error, DiskFullError)
    assert str(error) == (
        "database postgresql+psycopg://postgres:***@db/opdb: the disk is full (could not extend "
        'file "base/16384/16385": No space left on device): nothing of the transaction was '
        "written; free space on the database server and retry"
    )


def test_other_failures_keep_their_words() -> None:
    down = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    error = describe_db_error(OperationalError("SELECT", None, down), PG)
    assert type(error) is DatabaseError
    assert str(error) == (
        "database postgresql+psycopg://postgres:***@db/opdb is unavailable: "
        "terminating connection due to administrator command"
    )
    denied = psycopg.errors.InsufficientPrivilege("permission denied for table jobs")
    refused = describe_db_error(ProgrammingError("UPDATE", None, denied), PG)
    assert type(refused) is DatabaseError
    assert str(refused).endswith("refused the operation: permission denied for table jobs")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_full_is_a_disk_full_error_and_reads_go_on(store: Store, tmp_path: Path) -> None:
    with sqlite_size_capped(store.engine):
        with pytest.raises(DiskFullError) as raised, store.transaction() as session:
            session.add_all(
                DeviceKind(name=f"kind {i:04d} " + "x" * 180, type="fake") for i in range(400)
            )
        assert str(raised.value).startswith(
            f"database {store.display_url}: the disk is full (database or disk is full; "
        )
        assert f" free in {tmp_path.resolve()})" in str(raised.value)
        with store.transaction(read_only=True) as session:
            assert session.scalar(select(func.count()).select_from(DeviceKind)) == 0
