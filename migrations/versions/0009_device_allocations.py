"""device allocations: durable, shared device holdings; runs say since when they wait

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "device_allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("node_address", sa.String(length=200), nullable=False),
        sa.Column("resource", sa.String(length=200), nullable=False),
        sa.Column("device_index", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_device_allocations_cluster_id_clusters"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_device_allocations_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_allocations")),
        sa.UniqueConstraint(
            "node_id", "resource", "device_index", name=op.f("uq_device_allocations_node_id_resource_device_index")
        ),
    )
    op.create_index(op.f("ix_device_allocations_node_id"), "device_allocations", ["node_id"], unique=False)
    op.create_index(op.f("ix_device_allocations_run_id"), "device_allocations", ["run_id"], unique=False)
    op.create_index(
        op.f("ix_device_allocations_lease_expires_at"),
        "device_allocations",
        ["lease_expires_at"],
        unique=False,
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("waiting_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("waiting_since")
    op.drop_index(op.f("ix_device_allocations_lease_expires_at"), table_name="device_allocations")
    op.drop_index(op.f("ix_device_allocations_run_id"), table_name="device_allocations")
    op.drop_index(op.f("ix_device_allocations_node_id"), table_name="device_allocations")
    op.drop_table("device_allocations")
