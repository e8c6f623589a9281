"""run_series_levels (downsampled levels of long series); series blobs stored uncompressed on PostgreSQL

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Float series barely compress, and pglz costs every write and read of them: keep them out of line
# (TOAST) but uncompressed. SQLite has no such setting.
_BLOBS = (("run_series", "steps"), ("run_series", "values"), ("run_series_levels", "steps"), ("run_series_levels", "values"))


def upgrade() -> None:
    op.create_table(
        "run_series_levels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("max_points", sa.Integer(), nullable=False),
        sa.Column("n_points", sa.Integer(), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_series_levels_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_series_levels")),
        sa.UniqueConstraint(
            "run_id", "metric", "max_points", name=op.f("uq_run_series_levels_run_id_metric_max_points")
        ),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table, column in _BLOBS:
            op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET STORAGE EXTERNAL')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, column in _BLOBS[:2]:
            op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET STORAGE EXTENDED')
    op.drop_table("run_series_levels")
