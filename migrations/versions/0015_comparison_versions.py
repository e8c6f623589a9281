"""comparison versions: a version per release that the database changes on every write a comparison reads

``comparison_versions.version`` takes a value never given before in the same transaction as every
insert, update and delete of the release's ``runs`` and ``run_metrics`` rows and every update of its
``releases`` row; the row of release id 0 changes on what every comparison reads (updates and deletes of variants, workloads and
clusters; any change of ``image_manifests``). Triggers, not the writers: every writer (ingest, the
dispatcher's claims and status changes, exclusions, deletes, plain SQL) is counted, and one that is added
later cannot forget it. A comparison is cached under the versions of the releases it read
(``backend/services/comparison/cache.py``), so a cached result is never reused after a write commits.

No foreign key: the runs' triggers fire while a release's cascade deletes them, and a deleted release's
row is harmless (ids are never reused, migration 0013).

On PostgreSQL the triggers of runs, run_metrics and releases run at commit (deferred constraint
triggers): the version row is the last lock a writer takes, so it joins no lock cycle.

SQLite drops a table's triggers when a batch migration rebuilds it: a later migration that rebuilds
runs, run_metrics, releases, variants, workloads, clusters or image_manifests must create these
triggers again (``tests/foundation/test_migrations.py`` checks that the head schema has them).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GLOBAL = 0  # the version every comparison reads besides its releases'
# A version is a value never given twice, not a counter: a write that rolls back takes its value with
# it, so a build made inside that transaction can never match a later version. PostgreSQL: a sequence
# (a rollback does not return its numbers); SQLite: a random 64-bit number.
SEQUENCE = "comparison_version_seq"
BUMP = "ON CONFLICT (release_id) DO UPDATE SET version = excluded.version"

# (table, events) whose writes bump the global row.
GLOBAL_TABLES = (
    ("variants", ("UPDATE", "DELETE")),
    ("workloads", ("UPDATE", "DELETE")),
    ("clusters", ("UPDATE", "DELETE")),
    ("image_manifests", ("INSERT", "UPDATE", "DELETE")),
)


def _postgresql() -> list[str]:
    # Row-level constraint triggers deferred to commit: the version row of a release is locked at the
    # very end of the writing transaction, after every other lock it takes. Taken mid-transaction (an
    # immediate trigger), one dispatcher could hold a release's version row while waiting for another's
    # device rows, which waits for the version row (a concurrent-claims test failed once that way,
    # most likely).
    ddl: list[str] = [f"CREATE SEQUENCE {SEQUENCE}"]
    upsert = f"INSERT INTO comparison_versions (release_id, version) SELECT r, nextval('{SEQUENCE}') FROM"
    for table, column, new_ids, old_ids in (
        ("runs", "release_id", "SELECT NEW.release_id", "SELECT OLD.release_id"),
        (
            "run_metrics",
            "run_id",
            "SELECT release_id FROM runs WHERE id = NEW.run_id",
            "SELECT release_id FROM runs WHERE id = OLD.run_id",  # none when its run is gone too
        ),
    ):
        name = f"comparison_version_{table}"
        ddl.append(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF TG_OP <> 'DELETE' THEN "
            f"{upsert} ({new_ids}) AS ids (r) WHERE r IS NOT NULL {BUMP}; END IF; "
            f"IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.{column} IS DISTINCT FROM NEW.{column}) THEN "
            f"{upsert} ({old_ids}) AS ids (r) WHERE r IS NOT NULL {BUMP}; END IF; "
            "RETURN NULL; END $$"
        )
        ddl.append(
            f"CREATE CONSTRAINT TRIGGER {name} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
    ddl.append(
        "CREATE FUNCTION comparison_version_releases() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO comparison_versions (release_id, version) VALUES (NEW.id, nextval('{SEQUENCE}')) {BUMP}; "
        "RETURN NULL; END $$"
    )
    ddl.append(
        "CREATE CONSTRAINT TRIGGER comparison_version_releases AFTER UPDATE ON releases "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION comparison_version_releases()"
    )
    ddl.append(
        "CREATE FUNCTION comparison_version_global() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO comparison_versions (release_id, version) VALUES ({GLOBAL}, nextval('{SEQUENCE}')) "
        f"{BUMP}; "
        "RETURN NULL; END $$"
    )
    for table, events in GLOBAL_TABLES:
        ddl.append(
            f"CREATE TRIGGER comparison_version_{table} AFTER {' OR '.join(events)} ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION comparison_version_global()"
        )
    return ddl


def _sqlite() -> list[str]:
    # SQLite has row-level triggers only; one writer at a time, so the repeated upserts of one row are
    # cheap in-place updates.
    def upsert(select: str, where: str = "true") -> str:
        # The WHERE is needed: SQLite's parser wants one before ON CONFLICT in INSERT ... SELECT.
        return f"INSERT INTO comparison_versions (release_id, version) {select} WHERE {where} {BUMP};"

    def of_run(ref: str) -> str:
        return upsert("SELECT release_id, random() FROM runs", f"id = {ref}")

    ddl: list[str] = []
    for event, body in (
        ("INSERT", upsert("SELECT NEW.release_id, random()")),
        (
            "UPDATE",
            upsert("SELECT NEW.release_id, random()")
            + upsert("SELECT OLD.release_id, random()", "OLD.release_id != NEW.release_id"),
        ),
        ("DELETE", upsert("SELECT OLD.release_id, random()")),
    ):
        ddl.append(
            f"CREATE TRIGGER comparison_version_runs_{event.lower()} AFTER {event} ON runs BEGIN {body} END"
        )
    for event, refs in (("INSERT", ("NEW",)), ("UPDATE", ("NEW", "OLD")), ("DELETE", ("OLD",))):
        body = " ".join(of_run(f"{r}.run_id") for r in refs)
        ddl.append(
            f"CREATE TRIGGER comparison_version_run_metrics_{event.lower()} AFTER {event} ON run_metrics "
            f"BEGIN {body} END"
        )
    ddl.append(
        "CREATE TRIGGER comparison_version_releases AFTER UPDATE ON releases "
        f"BEGIN {upsert('SELECT NEW.id, random()')} END"
    )
    for table, events in GLOBAL_TABLES:
        for event in events:
            ddl.append(
                f"CREATE TRIGGER comparison_version_{table}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN {upsert(f'SELECT {GLOBAL}, random()')} END"
            )
    return ddl


def upgrade() -> None:
    op.create_table(
        "comparison_versions",
        sa.Column("release_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("release_id", name=op.f("pk_comparison_versions")),
    )
    bind = op.get_bind()
    for statement in _postgresql() if bind.dialect.name == "postgresql" else _sqlite():
        bind.exec_driver_sql(statement)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for statement in _postgresql()[1:]:
            if statement.startswith("CREATE FUNCTION"):
                name = statement.split()[2].removesuffix("()")
                bind.exec_driver_sql(f"DROP FUNCTION {name}() CASCADE")  # and its triggers
    else:
        for statement in _sqlite():
            bind.exec_driver_sql(f"DROP TRIGGER {statement.split()[2]}")
    op.drop_table("comparison_versions")
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql(f"DROP SEQUENCE {SEQUENCE}")
