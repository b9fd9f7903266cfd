"""Migrations build the schema on both backends, match the models, and go down and up again."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

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
