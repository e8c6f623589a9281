"""Real databases for tests: a migrated SQLite file or PostgreSQL database per test, dropped afterwards.

PostgreSQL databases are cloned from a migrated template made once per test run, so every test
starts from the real migrated schema in tens of milliseconds without seeing another test's rows.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from ablate.backend.db import migrate
from ablate.backend.db.session import make_engine

PG_ADMIN_URL = os.environ.get("ABLATE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgresql")


def _pg_conninfo(url: str) -> str:
    u = make_url(url)
    parts = [f"host={u.host or '127.0.0.1'}", f"port={u.port or 5432}", f"user={u.username or 'postgres'}"]
    if u.password:
        parts.append(f"password={u.password}")
    parts.append(f"dbname={u.database or 'postgres'}")
    return " ".join(parts)


def pg_url(dbname: str) -> str:
    return make_url(PG_ADMIN_URL).set(database=dbname).render_as_string(hide_password=False)


class DatabaseFactory:
    """Creates fresh databases for one pytest session and drops every one of them at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.run_id = f"{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._pg_created: list[str] = []
        self._pg_template: str | None = None
        self._sqlite_template: Path | None = None

    # PostgreSQL -----------------------------------------------------------------
    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(_pg_conninfo(PG_ADMIN_URL), autocommit=True)

    def _create_pg(self, template: str | None = None) -> str:
        name = f"ablate_test_{self.run_id}_{len(self._pg_created)}"
        with self._admin() as conn:
            clause = f" TEMPLATE {template}" if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{clause}')
        self._pg_created.append(name)
        return name

    def new_postgresql(self, *, migrated: bool = True) -> str:
        if not migrated:
            return pg_url(self._create_pg())
        if self._pg_template is None:
            name = self._create_pg()
            engine = make_engine(pg_url(name))
            migrate.upgrade(engine)
            engine.dispose()
            self._pg_template = name
        return pg_url(self._create_pg(self._pg_template))

    # SQLite ---------------------------------------------------------------------
    def new_sqlite(self, *, migrated: bool = True) -> str:
        path = self.workdir / f"ablate_{uuid.uuid4().hex[:10]}.sqlite"
        if migrated:
            if self._sqlite_template is None:
                template = self.workdir / "template.sqlite"
                engine = make_engine(f"sqlite:///{template}")
                migrate.upgrade(engine)
                with engine.connect() as conn:  # fold the WAL into the file so a copy is complete
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                engine.dispose()
                self._sqlite_template = template
            shutil.copyfile(self._sqlite_template, path)
        return f"sqlite:///{path}"

    def new(self, backend: str, *, migrated: bool = True) -> str:
        if backend == "sqlite":
            return self.new_sqlite(migrated=migrated)
        if backend == "postgresql":
            return self.new_postgresql(migrated=migrated)
        raise ValueError(backend)

    def drop(self, url: str) -> None:
        """Drop one database a test is done with, so the session's end does not drop hundreds at once:
        each DROP DATABASE waits for a checkpoint, and on a loaded machine that pile (all in the last
        test's teardown, under its timeout) passed 600 s. One that cannot be dropped now is left for
        :meth:`close`."""
        u = make_url(url)
        if u.get_backend_name() == "sqlite":
            if u.database:
                for suffix in ("", "-wal", "-shm"):
                    Path(u.database + suffix).unlink(missing_ok=True)
            return
        name = u.database
        if name not in self._pg_created or name == self._pg_template:
            return
        try:
            with self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error:
            return  # still in use or the server is slow: close() tries again at the end
        self._pg_created.remove(name)

    def close(self) -> None:
        if not self._pg_created:
            return
        with self._admin() as conn:
            for name in reversed(self._pg_created):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def database_factory(workdir: Path) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(workdir)
    try:
        yield factory
    finally:
        factory.close()
