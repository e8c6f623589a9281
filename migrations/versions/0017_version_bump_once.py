"""comparison versions: one bump per release and transaction on PostgreSQL

Migration 0015's deferred row triggers upserted the release's version row once per written row, all
at commit. A transaction that writes many rows of one release (a bulk import, a large ingest, a claim
of many runs) updated that one row thousands of times: each update leaves a row version the next one
must step over, so the cost grew with the square of the rows (550,000 runs and 2.2 million metrics of
one release had not committed after 38 minutes). The triggers now call ``comparison_version_bump``,
which upserts a release's row once per transaction and remembers the releases it bumped in a
transaction-local setting (``ablate.versions_bumped``, a comma-separated list; one setting rather than
one per release, because a custom setting, once named, stays defined for the connection's life).

Once is enough: these triggers are deferred to commit and nothing in Ablate fires them earlier (no
``SET CONSTRAINTS ... IMMEDIATE``), so every write of the transaction precedes the bump, and the value
is new all the same. SQLite keeps its immediate triggers (one writer at a time, in-place updates).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEQUENCE = "comparison_version_seq"
BUMPED = "ablate.versions_bumped"

BUMP_ONCE = (
    "CREATE FUNCTION comparison_version_bump(r integer) RETURNS void LANGUAGE plpgsql AS $$ "
    f"DECLARE done text := coalesce(current_setting('{BUMPED}', true), ''); BEGIN "
    "IF r IS NULL OR strpos(done, ',' || r || ',') > 0 THEN RETURN; END IF; "
    f"INSERT INTO comparison_versions (release_id, version) VALUES (r, nextval('{SEQUENCE}')) "
    "ON CONFLICT (release_id) DO UPDATE SET version = excluded.version; "
    f"PERFORM set_config('{BUMPED}', CASE WHEN done = '' THEN ',' ELSE done END || r || ',', true); "
    "END $$"
)


def _row_function(table: str, column: str, new_ids: str, old_ids: str, bump: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION comparison_version_{table}() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN "
        f"IF TG_OP <> 'DELETE' THEN {bump.format(ids=new_ids)} END IF; "
        f"IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.{column} IS DISTINCT FROM NEW.{column}) "
        f"THEN {bump.format(ids=old_ids)} END IF; "
        "RETURN NULL; END $$"
    )


# (table, column, the new row's release, the old row's release) as in migration 0015
ROW_TABLES = (
    ("runs", "release_id", "SELECT NEW.release_id", "SELECT OLD.release_id"),
    (
        "run_metrics",
        "run_id",
        "SELECT release_id FROM runs WHERE id = NEW.run_id",
        "SELECT release_id FROM runs WHERE id = OLD.run_id",  # none when its run is gone too
    ),
)
ONCE = "PERFORM comparison_version_bump(({ids}));"
# migration 0015's body, for the downgrade
EVERY_ROW = (
    f"INSERT INTO comparison_versions (release_id, version) SELECT r, nextval('{SEQUENCE}') FROM "
    "({ids}) AS ids (r) WHERE r IS NOT NULL ON CONFLICT (release_id) DO UPDATE SET version = excluded.version;"
)
RELEASES = (
    "CREATE OR REPLACE FUNCTION comparison_version_releases() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN {body} RETURN NULL; END $$"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql(BUMP_ONCE)
    for row in ROW_TABLES:
        bind.exec_driver_sql(_row_function(*row, bump=ONCE))
    bind.exec_driver_sql(RELEASES.format(body=ONCE.format(ids="NEW.id")))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for row in ROW_TABLES:
        bind.exec_driver_sql(_row_function(*row, bump=EVERY_ROW))
    bind.exec_driver_sql(RELEASES.format(body=EVERY_ROW.format(ids="SELECT NEW.id")))
    bind.exec_driver_sql("DROP FUNCTION comparison_version_bump(integer)")
