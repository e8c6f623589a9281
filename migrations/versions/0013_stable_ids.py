"""stable ids: SQLite never hands a deleted row's id to a new row

SQLite's plain ``INTEGER PRIMARY KEY`` reuses the highest ids after a delete (``ablate release delete``
freed runs 139-158, and the next study's run became run 139, so audit entries, CI logs and bookmarks
pointed at another run). ``AUTOINCREMENT`` keeps a high-water mark in ``sqlite_sequence``: every table
with a single integer key is rebuilt with it. Ids freed before this migration cannot be recovered; from
here on none is reused. PostgreSQL sequences never reuse ids: nothing to do there.

Revision ID: 0013
Revises: 0010
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _single_integer_key_tables(conn: sa.Connection) -> list[str]:
    inspector = sa.inspect(conn)
    tables = []
    for name in inspector.get_table_names():
        if name == "alembic_version" or name.startswith("sqlite_"):
            continue
        keys = inspector.get_pk_constraint(name)["constrained_columns"]
        if len(keys) != 1:
            continue
        column = next(c for c in inspector.get_columns(name) if c["name"] == keys[0])
        if isinstance(column["type"], sa.Integer):
            tables.append(name)
    return tables


def _rebuild(autoincrement: bool) -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    # migrations/env.py turns foreign keys off on SQLite: dropping the old copy of a parent table
    # would otherwise cascade into its children.
    for name in _single_integer_key_tables(conn):
        with op.batch_alter_table(
            name, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
