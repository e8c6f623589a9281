"""containers: a release's image registry, a cluster's container runtime, and what an image holds per digest

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("image_registry", sa.String(length=500), nullable=True))
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("container", sa.JSON(), nullable=True))
    op.create_table(
        "image_manifests",
        sa.Column("digest", sa.String(length=300), nullable=False),
        sa.Column("reference", sa.String(length=700), nullable=False),
        sa.Column("components", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_image_manifests")),
    )


def downgrade() -> None:
    op.drop_table("image_manifests")
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("container")
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("image_registry")
