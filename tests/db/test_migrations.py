"""Migrations build the schema on both backends, match the models, and go down and up again."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from operator_db.db.engine import make_engine
from operator_db.db.migrate import current_revision, downgrade, head_revision, upgrade
from operator_db.db.models import Base

EXPECTED_TABLES = {
    "alembic_version",
    "device_kinds",
    "device_peaks",
    "full_model_runs",
    "hosts",
    "jobs",
    "measurements",
    "model_operators",
    "models",
    "operator_configs",
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
        assert {ix["name"] for ix in inspector.get_indexes("measurements")} == {
            "ix_measurements_lookup"
        }
        assert {ix["name"] for ix in inspector.get_indexes("model_operators")} == {
            "ix_model_operators_config_id"
        }
        uniques = {uc["name"] for uc in inspector.get_unique_constraints("operator_configs")}
        assert uniques == {"uq_operator_configs_key"}
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
