"""runs.excluded_at / exclusion_reason (a run left out of every analysis) and audit_events

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch mode: SQLite rebuilds the table; PostgreSQL adds the columns in place.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("excluded_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("exclusion_reason", sa.Text(), nullable=True))
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("actor_token_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("release", sa.String(length=265), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.CheckConstraint(
            "action IN ('exclude_run', 'include_run', 'delete_study', 'delete_release')",
            name=op.f("ck_audit_events_action"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_release"), ["release"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_events_study_id"), ["study_id"], unique=False)


def downgrade() -> None:
    op.drop_table("audit_events")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("exclusion_reason")
        batch_op.drop_column("excluded_at")
