"""operator_configs.kind -> form: a configuration's form (module, function, opaque)

"Kind" meant three things; it now names only a device kind (device_kinds, a chip). How an
operator is run is its form; what sort of device a kind is stays device_kinds.type.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FORMS = ("module", "function", "opaque")


def _rename(old: str, new: str, old_check: str, new_check: str) -> None:
    values = ", ".join(f"'{v}'" for v in FORMS)
    with op.batch_alter_table("operator_configs") as batch:
        batch.drop_constraint(op.f(f"ck_operator_configs_{old_check}"), type_="check")
        batch.alter_column(
            old, new_column_name=new, existing_type=sa.String(16), existing_nullable=False
        )
        batch.create_check_constraint(
            op.f(f"ck_operator_configs_{new_check}"), sa.text(f"{new} IN ({values})")
        )


def upgrade() -> None:
    _rename("kind", "form", "op_kind", "op_form")


def downgrade() -> None:
    _rename("form", "kind", "op_form", "op_kind")
