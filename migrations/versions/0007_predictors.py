"""Cost models of operator types per device kind (opdb predict train)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "predictors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_kind_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=300), nullable=False),
        sa.Column(
            "target",
            sa.Enum("time", "energy", name="predictor_target", native_enum=False, length=16,
                    create_constraint=True),
            nullable=False,
        ),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("features", JSON, nullable=False),
        sa.Column("estimator", sa.LargeBinary(), nullable=False),
        sa.Column("interval_ln", sa.Float(), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("cv_median_error", sa.Float(), nullable=True),
        sa.Column("data_hash", sa.String(length=64), nullable=False),
        sa.Column("peaks", JSON, nullable=False),
        sa.Column("library", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_kind_id"],
            ["device_kinds.id"],
            name=op.f("fk_predictors_device_kind_id_device_kinds"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictors")),
        sa.UniqueConstraint(
            "device_kind_id",
            "version",
            "op",
            "target",
            name=op.f("uq_predictors_device_kind_id_version_op_target"),
        ),
    )


def downgrade() -> None:
    op.drop_table("predictors")
