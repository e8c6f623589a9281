"""run_metrics.better: a custom metric's direction, fixed at ingest

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch mode: SQLite cannot add a CHECK constraint to an existing table in place.
    with op.batch_alter_table("run_metrics", schema=None) as batch_op:
        batch_op.add_column(sa.Column("better", sa.String(length=8), nullable=True))
        batch_op.create_check_constraint(
            op.f("ck_run_metrics_better"), "better IS NULL OR better IN ('higher', 'lower')"
        )


def downgrade() -> None:
    with op.batch_alter_table("run_metrics", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_run_metrics_better"), type_="check")
        batch_op.drop_column("better")
