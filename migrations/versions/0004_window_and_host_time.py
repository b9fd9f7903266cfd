"""Time inside the energy windows; the host's issue time of a call and of a hollow run (GPU)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("measurements", "full_model_runs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("window_time_per_call_s", sa.Float(), nullable=True))
            batch.add_column(sa.Column("host_time_per_call_s", sa.Float(), nullable=True))
            if table == "full_model_runs":
                batch.add_column(sa.Column("hollow_host_time_s", sa.Float(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            if table == "full_model_runs":
                batch.drop_column("hollow_host_time_s")
            batch.drop_column("host_time_per_call_s")
            batch.drop_column("window_time_per_call_s")
