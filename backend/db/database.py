"""A database handle: the engine and session factory one process uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine
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
