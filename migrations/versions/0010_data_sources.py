"""Imported data sets: a data source per data set, each result's source and its identity there

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")

TABLES = {
    "measurements": ("ix_measurements_lookup", "config_id"),
    "full_model_runs": ("ix_full_model_runs_lookup", "model_id"),
}


def upgrade() -> None:
    op.create_table(
        "data_sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=True),
        sa.Column("version", sa.String(length=100), nullable=True),
        sa.Column("license", sa.String(length=100), nullable=True),
        sa.Column("citation", sa.Text(), nullable=True),
        sa.Column("method", sa.Text(), nullable=True),
        sa.Column("info", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_data_sources")),
        sa.UniqueConstraint("name", name=op.f("uq_data_sources_name")),
    )
    for table, (index, target) in TABLES.items():
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("source_id", sa.Integer(), nullable=True))
            batch.add_column(sa.Column("source_ref", sa.String(length=64), nullable=True))
            batch.create_foreign_key(
                op.f(f"fk_{table}_source_id_data_sources"),
                "data_sources",
                ["source_id"],
                ["id"],
                ondelete="CASCADE",
            )
            batch.create_unique_constraint(
                op.f(f"uq_{table}_source_id_source_ref"), ["source_id", "source_ref"]
            )
            batch.drop_index(index)
            batch.create_index(
                index,
                ["device_kind_id", target, "cache_mode", "timing", "created_at", "source_id"],
            )


def downgrade() -> None:
    for table, (index, target) in TABLES.items():
        with op.batch_alter_table(table) as batch:
            batch.drop_index(index)
            batch.create_index(index, ["device_kind_id", target, "cache_mode", "timing", "created_at"])
            batch.drop_constraint(op.f(f"uq_{table}_source_id_source_ref"), type_="unique")
            batch.drop_constraint(op.f(f"fk_{table}_source_id_data_sources"), type_="foreignkey")
            batch.drop_column("source_ref")
            batch.drop_column("source_id")
    op.drop_table("data_sources")
