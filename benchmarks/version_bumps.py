"""The comparison-version triggers' cost on a transaction that writes many rows of one release.

For each migration revision given (default: 0016, the per-row bump of migration 0015, and head, the
once-per-transaction bump of 0017) a fresh PostgreSQL database is seeded with the standard release
and then, per rep and size, N metric rows of one run are inserted and committed in one transaction
twice: with the triggers, and with every trigger off (``session_replication_role = replica``), the
floor. Prints the median time of each and their median paired ratio.

    PYTHONPATH=. .venv/bin/python benchmarks/version_bumps.py --sizes 5000 20000 --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg

from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from benchmarks._db import ADMIN, conninfo, median_paired_ratio
from tests.reports import seed

INSERT = (
    "INSERT INTO run_metrics (run_id, name, value, unit) "
    "SELECT %s, 'bench' || g, g, 'x' FROM generate_series(1, %s) AS g"
)


def _commit_rows(conn: psycopg.Connection, run_id: int, rows: int, *, triggers: bool) -> float:
    start = time.perf_counter()
    with conn.transaction():
        if not triggers:
            conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(INSERT, (run_id, rows))
    elapsed = time.perf_counter() - start
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("DELETE FROM run_metrics WHERE name LIKE 'bench%%'")
    return elapsed


def measure(revision: str, sizes: list[int], reps: int) -> None:
    name = f"ablate_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1/{name}"
    db = Database.from_url(url)
    try:
        migrate.upgrade(db.engine, revision)
        seed.seed_standard(db)
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            row = conn.execute("SELECT id FROM runs ORDER BY id LIMIT 1").fetchone()
            assert row is not None
            for rows in sizes:
                with_t, floor = [], []
                for _ in range(reps):
                    with_t.append(_commit_rows(conn, row[0], rows, triggers=True))
                    floor.append(_commit_rows(conn, row[0], rows, triggers=False))
                print(
                    f"{revision:>5} {rows:>7,} rows: {statistics.median(with_t) * 1e3:8.0f} ms with the"
                    f" triggers, {statistics.median(floor) * 1e3:6.0f} ms without,"
                    f" ratio {median_paired_ratio(with_t, floor):6.2f}x",
                    flush=True,
                )
    finally:
        db.dispose()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--revisions", nargs="+", default=["0016", "head"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[5000, 20000])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    for revision in args.revisions:
        measure(revision, args.sizes, args.reps)


if __name__ == "__main__":
    main()
