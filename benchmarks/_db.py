"""What the database benchmarks share: a fresh, migrated database, and the median of paired ratios.

``ABLATE_BENCH_PG`` is the libpq connection string of a PostgreSQL role that may create databases
(default: the local ``postgres`` user with trust authentication, as in the test suite).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import uuid
from collections.abc import Iterator, Sequence
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
