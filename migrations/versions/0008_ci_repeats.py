"""ci loop: a CI result is stored once per cell and repeat

Existing duplicates (a CI job that always sent repeat 0) are renumbered before the unique index is
made: the first stored keeps its repeat, each later one gets the next free repeat of its cell and
keeps the old number in ``provenance.renumbered_from_repeat``. No run is dropped.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CI = sa.text("source = 'ci'")


def _renumber_duplicates(conn: sa.Connection) -> None:
    runs = sa.table(
        "runs",
        sa.column("id", sa.Integer),
        sa.column("release_id", sa.Integer),
        sa.column("cluster_id", sa.Integer),
        sa.column("workload_id", sa.Integer),
        sa.column("variant_id", sa.Integer),
        sa.column("repeat", sa.Integer),
        sa.column("source", sa.String),
        sa.column("provenance", sa.JSON),
    )
    rows = conn.execute(
        sa.select(runs.c.id, runs.c.release_id, runs.c.cluster_id, runs.c.workload_id, runs.c.variant_id,
                  runs.c.repeat, runs.c.provenance)
        .where(runs.c.source == "ci")
        .order_by(runs.c.id)
    ).all()  # fmt: skip
    top: dict[tuple[int, int, int, int], int] = {}
    for r in rows:
        cell = (r.release_id, r.cluster_id, r.workload_id, r.variant_id)
        top[cell] = max(top.get(cell, -1), r.repeat)
    taken: set[tuple[tuple[int, int, int, int], int]] = set()
    for r in rows:
        cell = (r.release_id, r.cluster_id, r.workload_id, r.variant_id)
        if (cell, r.repeat) not in taken:
            taken.add((cell, r.repeat))
            continue
        top[cell] += 1
        provenance = {**(r.provenance or {}), "renumbered_from_repeat": str(r.repeat)}
        conn.execute(sa.update(runs).where(runs.c.id == r.id).values(repeat=top[cell], provenance=provenance))
        taken.add((cell, top[cell]))


def upgrade() -> None:
    _renumber_duplicates(op.get_bind())
    with op.batch_alter_table("runs") as batch:
        batch.create_index(
            "uq_runs_ci_cell_repeat",
            ["release_id", "cluster_id", "workload_id", "variant_id", "repeat"],
            unique=True,
            sqlite_where=_CI,
            postgresql_where=_CI,
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("uq_runs_ci_cell_repeat")
