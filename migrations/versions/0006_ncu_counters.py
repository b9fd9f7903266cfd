"""Hardware counters of configurations from Nsight Compute (opdb ncu import)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ncu_counters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("config_id", sa.Integer(), nullable=False),
        sa.Column("device_kind_id", sa.Integer(), nullable=False),
        sa.Column("kernels", sa.Integer(), nullable=False),
        sa.Column("gpu_time_s", sa.Float(), nullable=True),
        sa.Column("dram_read_bytes", sa.BigInteger(), nullable=True),
        sa.Column("dram_write_bytes", sa.BigInteger(), nullable=True),
        sa.Column("flops_fp32", sa.BigInteger(), nullable=True),
        sa.Column("flops_fp16", sa.BigInteger(), nullable=True),
        sa.Column("flops_fp64", sa.BigInteger(), nullable=True),
        sa.Column("tensor_instructions", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["config_id"],
            ["operator_configs.id"],
            name=op.f("fk_ncu_counters_config_id_operator_configs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["device_kind_id"],
            ["device_kinds.id"],
            name=op.f("fk_ncu_counters_device_kind_id_device_kinds"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ncu_counters")),
    )
    op.create_index(
        "ix_ncu_counters_lookup",
        "ncu_counters",
        ["device_kind_id", "config_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_ncu_counters_lookup", table_name="ncu_counters")
    op.drop_table("ncu_counters")
