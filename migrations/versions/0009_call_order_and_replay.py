"""A model's call order and synchronizing calls (spec version 3), its operators' times in a replay

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 07:15:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("calls", _JSON, nullable=True))
        batch.add_column(sa.Column("syncs", _JSON, nullable=True))
    with op.batch_alter_table("full_model_runs") as batch:
        batch.add_column(sa.Column("replay", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("full_model_runs") as batch:
        batch.drop_column("replay")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("syncs")
        batch.drop_column("calls")
