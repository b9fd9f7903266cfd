"""full_model_runs.hollow_time_s: the model's time outside its operators

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 21:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("full_model_runs") as batch:
        batch.add_column(sa.Column("hollow_time_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("full_model_runs") as batch:
        batch.drop_column("hollow_time_s")
