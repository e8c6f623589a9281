"""What the database benchmarks share: a fresh, migrated database, bulk loading by ``COPY``, and the
median of paired ratios.

``ABLATE_BENCH_PG`` is the libpq connection string of a PostgreSQL role that may create databases
(default: the local ``postgres`` user with trust authentication, as in the test suite).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import psycopg

from ablate.backend.db import migrate
from ablate.backend.db.database import Database

ADMIN = os.environ.get("ABLATE_BENCH_PG", "host=127.0.0.1 user=postgres dbname=postgres")


@contextmanager
def fresh_database(kind: str = "postgresql") -> Iterator[str]:
    """The URL of a new, migrated database: a PostgreSQL one dropped on exit, or SQLite in a temp folder."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.sqlite"
            _migrate(url)
            yield url
        return
    name = f"ablate_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1/{name}"
    try:
        _migrate(url)
        yield url
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_db(kind: str = "postgresql") -> Iterator[Database]:
    """:func:`fresh_database`, opened: its :class:`Database`, disposed on exit."""
    with fresh_database(kind) as url:
        db = Database.from_url(url)
        try:
            yield db
        finally:
            db.dispose()


def _migrate(url: str) -> None:
    db = Database.from_url(url)
    try:
        migrate.upgrade(db.engine)
    finally:
        db.dispose()


def median_paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Median of the per-repetition ratios: each repetition measures both sides back to back, and on a
    shared machine the median of paired ratios is steadier than the ratio of two medians."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


# The columns of a finished run that the COPY loaders write (the rest keep their defaults).
RUN_COLUMNS = (
    "id, release_id, cluster_id, workload_id, variant_id, repeat, status, attempt, source, "
    "queue_order, created_at, started_at, finished_at, updated_at, provenance, environment"
)


def conninfo(url: str) -> str:
    """The libpq connection string of a database that ``fresh_database()`` made."""
    return f"host=127.0.0.1 user=postgres dbname={url.rsplit('/', 1)[1]}"


def copy_rows(conn: psycopg.Connection, table: str, columns: str, rows: Iterable[Sequence[object]]) -> None:
    """Write ``rows`` into ``table`` with one ``COPY ... FROM STDIN``: seeding a million rows in seconds,
    where the ORM or the ingest path would take many minutes."""
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


# The row-level version triggers of migration 0015 (PostgreSQL), deferred to commit. Before migration
# 0017 each upserted the release's version row, and a 10,000-cell seed stalled at its commit for over
# 38 minutes; since, each still runs once per row (and looks up the metric's run), which a seed of
# millions of rows need not pay.
VERSION_TRIGGERS = (("runs", "comparison_version_runs"), ("run_metrics", "comparison_version_run_metrics"))


@contextmanager
def versions_bumped_once(conn: psycopg.Connection) -> Iterator[None]:
    """Bulk writes of runs and run metrics in ``conn``'s transaction with the row-level version triggers
    off, then every release that has runs given a new version once, as the triggers would have left it
    (each release a value never given before); the triggers are back on before the transaction commits
    (``ALTER TABLE`` is transactional and locks the tables meanwhile, so no other writer goes uncounted).
    For seeding only: what the triggers cost writers is not what a seed measures."""
    for table, trigger in VERSION_TRIGGERS:
        conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
    yield
    for table, trigger in VERSION_TRIGGERS:
        conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
    conn.execute(
        "INSERT INTO comparison_versions (release_id, version) "
        "SELECT r, nextval('comparison_version_seq') FROM (SELECT DISTINCT release_id AS r FROM runs) AS ids "
        "ON CONFLICT (release_id) DO UPDATE SET version = excluded.version"
    )


def set_run_sequence(conn: psycopg.Connection, last_id: int) -> None:
    """After a COPY with explicit ids, the next run the service creates gets ``last_id + 1``."""
    conn.execute("SELECT setval('runs_id_seq', %s)", (last_id,))
