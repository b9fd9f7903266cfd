"""Cross-device cost models: one row per training run over every GPU's results

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "cross_predictors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kinds", _JSON, nullable=False),
        sa.Column("families", _JSON, nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("data_hash", sa.String(length=64), nullable=False),
        sa.Column("library", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cross_predictors")),
        sa.UniqueConstraint("version", name=op.f("uq_cross_predictors_version")),
    )


def downgrade() -> None:
    op.drop_table("cross_predictors")
