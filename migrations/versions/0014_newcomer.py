"""newcomer: a release benchmarked on CPUs only says ``platform: cpu``; a cluster states its devices' memory

``clusters.device_memory_gib``: the advisor's budget came from a ``memory_gib`` cluster label, but
cluster labels are Ray placement selectors, so that label made every run unplaceable.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _platforms(values: str) -> None:
    with op.batch_alter_table("releases", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_releases_platform"), type_="check")
        batch_op.create_check_constraint(op.f("ck_releases_platform"), f"platform IN ({values})")


def upgrade() -> None:
    _platforms("'gpu', 'ppu', 'cpu'")
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("device_memory_gib", sa.Float(), nullable=True))


def downgrade() -> None:
    # A cpu release has no older name: refuse rather than relabel it as a GPU release.
    bind = op.get_bind()
    count = bind.exec_driver_sql("SELECT count(*) FROM releases WHERE platform = 'cpu'").scalar_one()
    if count:
        raise RuntimeError(f"{count} release(s) have platform 'cpu', which migration 0013 cannot hold")
    _platforms("'gpu', 'ppu'")
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.drop_column("device_memory_gib")
