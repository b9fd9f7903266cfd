"""The database failing at a session's end, or its disk full: always a whole HTTP answer."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from operator_db.db.store import Store
from operator_db.errors import DatabaseError, SchemaMismatchError
from tests.api.common import AUTH, api_client
from tests.helpers import linear_op, spec_dict, sqlite_size_capped

MODEL = "mlp-small-b8"
DROPPED = "terminating connection due to administrator command"
"""What PostgreSQL says to a session whose connection it ends (a restart, pg_terminate_backend)."""
WIDE = 200
"""Operators of a model whose jobs need more pages than a database's slack holds."""


def failing_at(step: str) -> type[Session]:
    """A session class whose ``step`` (``commit`` or ``close``) fails as a dropped connection."""

    def fail(self: Session) -> None:
        if step == "close":
            Session.close(self)  # the connection goes back to the pool; then the failure
        raise OperationalError(step.upper(), None, Exception(DROPPED))

    return type(f"FailsAt{step.title()}", (Session,), {step: fail})


def inject(monkeypatch: pytest.MonkeyPatch, store: Store, which: str, step: str) -> None:
    """Make ``store``'s ``which`` factory (``read_sessions`` or ``sessions``) fail at ``step``."""
    factory: sessionmaker[Session] = getattr(store, which)
    monkeypatch.setattr(store, which, sessionmaker(**{**factory.kw, "class_": failing_at(step)}))


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url, [MODEL]) as c:
        yield c


def is_problem(response: Any, status: int, error: str) -> bool:
    body = response.json()
    return (
        response.status_code == status
        and response.headers["content-type"] == "application/problem+json"
        and (body["status"], body["error"]) == (status, error)
    )


def test_a_read_whose_commit_fails_is_a_503_problem(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    inject(monkeypatch, client.app.state.store, "read_sessions", "commit")  # type: ignore[attr-defined]
    # Before the session ended ahead of the response, the failure came after the 200 had begun:
    # the test client raised it, a real client saw its connection dropped.
    answer = client.get("/models")
    assert is_problem(answer, 503, "DatabaseError")
    assert DROPPED in answer.json()["detail"]
    page = client.get("/ui/")  # the pages' reads end the same way
    assert page.status_code == 503


def test_a_read_whose_close_fails_keeps_its_answer(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    expected = client.get("/models").json()
    inject(monkeypatch, client.app.state.store, "read_sessions", "close")  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="operator_db.db.store"):
        answer = client.get("/models")
    assert answer.status_code == 200 and answer.json() == expected
    assert [r.getMessage() for r in caplog.records] == [
        f"closing a session failed: database {client.app.state.store.display_url} "  # type: ignore[attr-defined]
        f"is unavailable: {DROPPED}"
    ]


def test_a_write_whose_commit_fails_is_a_503_and_stores_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    with monkeypatch.context() as patch:
        inject(patch, store, "sessions", "commit")
        answer = client.post(f"/models/{MODEL}/jobs", json={"device_kind": "cpu:x"}, headers=AUTH)
    # Before, the commit ran after a 201 had been sent: the client was told of jobs never stored.
    assert is_problem(answer, 503, "DatabaseError")
    assert client.get("/jobs/counts").json() == {}
    assert client.get("/jobs").json()["total"] == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_full_disk_is_a_507_problem_and_reads_go_on(client: TestClient) -> None:
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    wide = yaml.safe_dump(spec_dict("wide", [linear_op(inp=8 + i) for i in range(WIDE)]))
    assert client.post("/specs", params={"name": "wide"}, content=wide, headers=AUTH).is_success
    before = client.get("/models/wide").json()
    with sqlite_size_capped(store.engine):  # SQLite then fails as on a full disk
        answer = client.post("/models/wide/jobs", json={"device_kind": "cpu:x"}, headers=AUTH)
        assert is_problem(answer, 507, "DiskFullError")
        body = answer.json()
        assert body["title"] == "Insufficient Storage"
        assert body["detail"].startswith(f"database {store.display_url}: the disk is full (")
        assert body["detail"].endswith(
            ": nothing of the transaction was written; free space and retry"
        )
        assert client.get("/models/wide").json() == before
        assert client.get("/jobs").json()["total"] == 0


def test_pooled_connections_killed_are_replaced_before_use(
    client: TestClient, db_url: str, backend: str
) -> None:
    """Every pooled connection of the API ended by the server (a restart, a proxy's idle timeout)
    is found dead before a request uses it: the next requests are answered, none is a 503."""
    if backend != "postgresql":
        pytest.skip("SQLite has no server to end a connection")
    from sqlalchemy import create_engine, text

    assert all(client.get("/models").status_code == 200 for _ in range(4))  # the pool fills
    admin = create_engine(db_url)
    try:
        with admin.connect() as conn:
            ended = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
    finally:
        admin.dispose()
    assert ended >= 1
    assert [client.get("/models").status_code for _ in range(8)] == [200] * 8


def lost_once(calls: list[str], times: int = 1) -> type[Session]:
    """A session class whose first ``times`` commits find their connection ended by the server."""

    def commit(self: Session) -> None:
        calls.append("commit")
        if len(calls) <= times:
            raise OperationalError("COMMIT", None, Exception(DROPPED), connection_invalidated=True)
        Session.commit(self)

    return type("LostOnce", (Session,), {"commit": commit})


def test_a_read_whose_connection_was_ended_is_run_again_a_write_is_not(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos run: after each pg_terminate_backend round, reads in flight were 503s with the
    database up (4 of ~7,000, 10 s after an outage). A read runs once more on a fresh connection;
    a write, whose commit may have landed, is a 503 (ConnectionLostError) with Retry-After."""
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    expected = client.get("/models").json()
    calls: list[str] = []
    read = store.read_sessions
    assert read is not None
    monkeypatch.setattr(
        store, "read_sessions", sessionmaker(**{**read.kw, "class_": lost_once(calls)})
    )
    answer = client.get("/models")
    assert answer.status_code == 200 and answer.json() == expected
    assert calls == ["commit", "commit"]
    writes: list[str] = []
    monkeypatch.setattr(
        store, "sessions", sessionmaker(**{**store.sessions.kw, "class_": lost_once(writes, 9)})
    )
    answer = client.post(
        f"/models/{MODEL}/jobs", json={"device_kind": "fake:FakeGPU"}, headers=AUTH
    )
    assert is_problem(answer, 503, "ConnectionLostError") and writes == ["commit"]
    assert answer.headers["Retry-After"]
    # Lost twice in a row, a read is a 503 too: run again once, not until it succeeds.
    calls.clear()
    monkeypatch.setattr(
        store, "read_sessions", sessionmaker(**{**read.kw, "class_": lost_once(calls, 2)})
    )
    assert is_problem(client.get("/models"), 503, "ConnectionLostError")
    assert calls == ["commit", "commit"]


def test_the_api_starts_while_its_database_is_away_and_serves_once_it_is_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos run: `opdb serve` started while PostgreSQL was down failed its start-up and exited
    (every client refused). It starts, answers 503 with Retry-After, and serves once the
    database answers; the schema is checked then."""
    real = Store.ensure_current
    tries: list[int] = []

    def away_twice(self: Store) -> None:
        tries.append(1)
        if len(tries) <= 2:
            raise DatabaseError(f"database {self.display_url} is unavailable: connection refused")
        real(self)

    monkeypatch.setattr(Store, "ensure_current", away_twice)
    with api_client(db_url) as c:
        first = c.get("/health")
        assert is_problem(first, 503, "DatabaseError") and first.headers["Retry-After"]
        assert "unavailable" in first.json()["detail"] and "://" not in first.json()["detail"]
        assert c.get("/health").status_code == 200
        assert c.get("/models").status_code == 200
    assert len(tries) == 3


def test_an_api_on_a_database_at_another_revision_does_not_start(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def behind(self: Store) -> None:
        raise SchemaMismatchError("database is at revision 0001, the code expects 0015")

    monkeypatch.setattr(Store, "ensure_current", behind)
    with pytest.raises(SchemaMismatchError), api_client(db_url):
        pass
