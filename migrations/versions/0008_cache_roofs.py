"""Cache levels as roofs of their own: a peak's level and capacity (opdb peaks on a CPU)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 04:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("device_peaks") as batch:
        batch.add_column(sa.Column("level", sa.String(length=8), nullable=True))
        batch.add_column(sa.Column("capacity_bytes", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("device_peaks") as batch:
        batch.drop_column("capacity_bytes")
        batch.drop_column("level")
