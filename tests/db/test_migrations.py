"""Migrations build the schema on both backends, match the models, and go down and up again."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from operator_db.db.engine import make_engine
from operator_db.db.migrate import (
    current_revision,
    downgrade,
    head_revision,
    known_revisions,
    schema_status,
    upgrade,
)
from operator_db.db.models import Base
from operator_db.errors import DatabaseError

EXPECTED_TABLES = {
    "alembic_version",
    "device_kinds",
    "data_sources",
    "device_peaks",
    "full_model_runs",
    "hosts",
    "jobs",
    "measurements",
    "model_operators",
    "models",
    "ncu_counters",
    "operator_configs",
    "predictors",
    "cross_predictors",
    "llms",
    "llm_steps",
    "generation_runs",
    "ui_sessions",
}


def test_upgrade_downgrade_upgrade(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        assert set(inspect(engine).get_table_names()) == EXPECTED_TABLES
        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        assert set(inspect(engine).get_table_names()) == EXPECTED_TABLES
    finally:
        engine.dispose()


def test_models_and_migrations_do_not_drift(db_url: str) -> None:
    """What `alembic check` verifies: autogenerate finds nothing to add on top of head."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_named_constraints_and_lookup_indexes(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        inspector = inspect(engine)
        assert {
            ix["name"]
            for ix in inspector.get_indexes("measurements")
            if not ix.get("duplicates_constraint")  # PostgreSQL lists a UNIQUE's index too
        } == {"ix_measurements_lookup"}
        # Revision 0005: the newest result of a target, kind, cache mode and timing is found in
        # the lookup index alone.
        lookups = {
            ix["name"]: ix["column_names"]
            for table in ("measurements", "full_model_runs")
            for ix in inspector.get_indexes(table)
            if not ix.get("duplicates_constraint")  # PostgreSQL lists a UNIQUE's index too
        }
        assert lookups == {
            "ix_measurements_lookup": [
                "device_kind_id",
                "config_id",
                "cache_mode",
                "timing",
                "created_at",
                "source_id",
            ],
            "ix_full_model_runs_lookup": [
                "device_kind_id",
                "model_id",
                "cache_mode",
                "timing",
                "created_at",
                "source_id",
            ],
        }
        assert {ix["name"] for ix in inspector.get_indexes("model_operators")} == {
            "ix_model_operators_config_id"
        }
        uniques = {uc["name"] for uc in inspector.get_unique_constraints("operator_configs")}
        assert uniques == {"uq_operator_configs_key"}
        for table in ("measurements", "full_model_runs"):  # an import's rows, once each
            assert {uc["name"] for uc in inspector.get_unique_constraints(table)} == {
                f"uq_{table}_source_id_source_ref"
            }
    finally:
        engine.dispose()


def test_0003_renames_kind_to_form_and_keeps_rows(empty_db_url: str) -> None:
    """A configuration stored before 0003 keeps its form; the CHECK follows the new name."""
    engine = make_engine(empty_db_url)
    row = {"k": "k" * 64, "now": datetime(2026, 1, 1, tzinfo=UTC)}
    insert = (
        "INSERT INTO operator_configs (key, op, {col}, mode, args, inputs, outputs, params, "
        "created_at) VALUES (:k, 'torch.nn.ReLU', '{form}', 'inference', '{{}}', '[]', '[]', 0, "
        ":now)"
    )
    try:
        upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(text(insert.format(col="kind", form="module")), row)
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT form FROM operator_configs")).scalars().all() == [
                "module"
            ]
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text(insert.format(col="form", form="lambda")), {**row, "k": "j" * 64})
        downgrade(engine, "0002")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT kind FROM operator_configs")).scalars().all() == [
                "module"
            ]
    finally:
        engine.dispose()


def test_schema_status_at_head(db_url: str) -> None:
    status = schema_status(db_url)
    assert (status.current, status.head) == (head_revision(), head_revision())
    assert status.at_head and status.known and status.exists
    assert status.dialect in ("sqlite", "postgresql")


def test_schema_status_behind_and_empty(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    try:
        with engine.connect():  # an empty database that exists (a SQLite file is made here)
            pass
        status = schema_status(empty_db_url)
        assert (status.current, status.at_head, status.known, status.exists) == (
            None,
            False,
            True,
            True,
        )
        upgrade(engine, "0003")
        status = schema_status(empty_db_url)
        assert status.current is not None and status.current.startswith("0003")
        assert not status.at_head and status.known
    finally:
        engine.dispose()


def test_schema_status_newer_than_the_code(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'from_the_future'"))
    finally:
        engine.dispose()
    status = schema_status(db_url)
    assert status.current == "from_the_future"
    assert not status.known and not status.at_head
    assert head_revision() in known_revisions()


def test_schema_status_never_creates_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "none.sqlite"
    status = schema_status(f"sqlite:///{path}")
    assert (status.exists, status.current, status.known) == (False, None, True)
    assert not path.parent.exists()


def test_schema_status_unreachable_is_one_line() -> None:
    url = "postgresql+psycopg://postgres:secret@127.0.0.1:1/none"
    with pytest.raises(DatabaseError) as info:
        schema_status(url)
    message = str(info.value)
    assert message.startswith("database postgresql+psycopg://postgres:***@127.0.0.1:1/none is ")
    assert "\n" not in message and "secret" not in message


def test_revisions_read_without_alembic_agree_with_alembic(empty_db_url: str) -> None:
    """head_revision and current_revision read ids themselves (start-up time): as Alembic does."""
    from alembic.script import ScriptDirectory

    from operator_db.db.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == script.get_current_head()
    engine = make_engine(empty_db_url)
    try:
        for revision in ["base", *reversed([r.revision for r in script.walk_revisions()])]:
            if revision != "base":
                upgrade(engine, revision)
            with engine.connect() as conn:
                alembic_says = MigrationContext.configure(conn).get_current_revision()
            assert (
                current_revision(engine)
                == alembic_says
                == (None if revision == "base" else revision)
            )
    finally:
        engine.dispose()


def test_several_heads_or_revisions_are_refused(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('~older')"))
        expected = f"is at several revisions ({head_revision()}, ~older)"
        with pytest.raises(DatabaseError, match=re.escape(expected)):
            current_revision(engine)
    finally:
        engine.dispose()
    versions = tmp_path / "versions"
    versions.mkdir()
    for name, text_ in {
        "a.py": 'revision = "a"\ndown_revision = None\n',
        "b.py": 'revision: str = "b"\ndown_revision: str | None = "a"\n',
        "c.py": 'revision = "c"\ndown_revision = "a"\n',
        "_ignored.py": "",
    }.items():
        (versions / name).write_text(text_)
    monkeypatch.setattr("operator_db.db.migrate.migrations_dir", lambda: tmp_path)
    with pytest.raises(DatabaseError, match=r"several heads \(b, c\)"):
        head_revision()
    (versions / "d.py").write_text('revision = "d"\ndown_revision = ("b", "c")\n')
    assert head_revision() == "d"
