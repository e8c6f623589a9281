"""A database handle: the engine and session factory one process uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from ablate.backend.db.session import make_engine, session_factory, transaction


@dataclass
class Database:
    engine: Engine
    sessions: sessionmaker[Session]

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> Database:
        """``create=False``: a SQLite file must already exist (for commands that only read)."""
        engine = make_engine(url, create=create)
        return cls(engine=engine, sessions=session_factory(engine))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with transaction(self.sessions) as session:
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


# SQLite's own words for a database it cannot use right now (another writer, the disk), as opposed to
# a statement it refuses ("no such table", a syntax error), which is a bug or an unmigrated schema.
_SQLITE_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o", "disk is full", "readonly")
# PostgreSQL SQLSTATE classes of the same: connection exception, insufficient resources, operator
# intervention (admin shutdown, "the database system is starting up").
_PG_UNAVAILABLE = ("08", "53", "57")


def unavailable(exc: BaseException) -> bool:
    """Whether a database error means the database cannot be reached or cannot take work for now
    (down, restarting, refusing connections, the pool exhausted, SQLite locked or its disk full),
    so that retrying later may succeed: an HTTP 503, a dispatcher that waits and tries again."""
    if isinstance(exc, sa_exc.TimeoutError):  # no pooled connection came free in time
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, sa_exc.OperationalError):
        return False
    state = getattr(exc.orig, "sqlstate", None)
    if state:
        return str(state)[:2] in _PG_UNAVAILABLE
    if type(exc.orig).__module__.startswith("sqlite3"):
        return any(word in str(exc.orig).lower() for word in _SQLITE_UNAVAILABLE)
    return True  # psycopg without a SQLSTATE: the connection itself failed (refused, closed)
