"""dispatchers: running dispatchers announce the clusters they serve

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
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
        "dispatchers",
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("gcs_address", sa.String(length=500), nullable=False),
        sa.Column("served_cluster_ids", sa.JSON(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_dispatchers")),
    )
    op.create_index(op.f("ix_dispatchers_expires_at"), "dispatchers", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_dispatchers_expires_at"), table_name="dispatchers")
    op.drop_table("dispatchers")
