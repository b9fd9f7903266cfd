"""A peak's source may be ``attained``: a GPU's L2 roof found from its results, stored once

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "peak_source"


def _check(values: tuple[str, ...]) -> sa.TextClause:
    return sa.text("source IN (" + ", ".join(f"'{v}'" for v in values) + ")")


def upgrade() -> None:
    with op.batch_alter_table("device_peaks") as batch:
        batch.drop_constraint(op.f(f"ck_device_peaks_{NAME}"), type_="check")
        batch.create_check_constraint(
            op.f(f"ck_device_peaks_{NAME}"), _check(("spec", "measured", "attained"))
        )


def downgrade() -> None:
    op.execute("DELETE FROM device_peaks WHERE source = 'attained'")
    with op.batch_alter_table("device_peaks") as batch:
        batch.drop_constraint(op.f(f"ck_device_peaks_{NAME}"), type_="check")
        batch.create_check_constraint(op.f(f"ck_device_peaks_{NAME}"), _check(("spec", "measured")))
