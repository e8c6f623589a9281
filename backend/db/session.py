"""Engines and sessions: one place that turns a URL into a working connection, or one clear error."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from ablate.backend.errors import ConfigError

SUPPORTED = ("sqlite", "postgresql")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str, *, pool_size: int = 10, create: bool = True) -> Engine:
    """Build an engine, refusing malformed or unsupported URLs with a message naming them.

    ``create=False`` is for commands that only read: a SQLite file that does not exist is an error
    naming it (a mistyped path must not leave an empty database and its folder behind)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"malformed database URL {url!r}: {exc}") from None
    if parsed.get_backend_name() not in SUPPORTED:
        raise ConfigError(
            f"unsupported database {parsed.get_backend_name()!r} in URL {parsed.render_as_string()!r}; "
            "use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
        )
    try:
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                path = Path(parsed.database).expanduser()
                if not create and not path.is_file():
                    raise ConfigError(f"no database at {path} (this command only reads; check the URL)")
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(parsed, connect_args={"timeout": 30, "check_same_thread": False})
            event.listen(engine, "connect", _sqlite_pragmas)
            with engine.connect() as conn:  # WAL lets readers go on while a writer commits
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        else:
            engine = create_engine(parsed, pool_size=pool_size, max_overflow=pool_size)
            _ping_when_idle(engine)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigError(f"no driver for database URL {parsed.render_as_string()!r}: {exc}") from None
    except OperationalError as exc:
        raise ConfigError(f"cannot open database {parsed.render_as_string()!r}: {_first_line(exc)}") from None
    return engine


PING_IDLE_S = 1.0  # a pooled connection idle this long is pinged before it is handed out again


def _ping_when_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling, as ``pool_pre_ping`` but only for a connection that sat in the
    pool ``PING_IDLE_S`` or longer: one back within a second (a dispatcher's loop, requests back to back)
    goes out unpinged, a round trip fewer each time, unless the server wrote to it meanwhile
    (:func:`_spoken_to`: a server that stopped or restarted within the second). A ping that fails
    makes the pool drop the connection and hand out a fresh one
    (:class:`~sqlalchemy.exc.DisconnectionError`); a server lost within the second without a word
    (a network cut) shows as the first statement's error, as one lost in the middle of a transaction
    does."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["ablate_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("ablate_idle_since")
        if since is None or (time.monotonic() - since < PING_IDLE_S and not _spoken_to(dbapi_connection)):
            return  # new, or back within the second and nothing from the server meanwhile
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection failed its ping: {exc}") from exc


def _spoken_to(dbapi_connection: Any) -> bool:
    """Whether the server wrote to an idle connection, or it is closed: a stopping or restarting
    PostgreSQL ends each session with a message and closes it, leaving the socket readable, where an
    idle session otherwise gets nothing. Seen without a round trip (``poll`` with no timeout; ``select``
    refuses descriptors of 1,024 and more, which a busy server may hold)."""
    if dbapi_connection.closed:
        return True
    fd = dbapi_connection.fileno()
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def check_connection(engine: Engine) -> None:
    """Raise ConfigError naming the database when it cannot be reached."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        raise ConfigError(
            f"cannot reach database {engine.url.render_as_string()!r}: {_first_line(exc)}"
        ) from None


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll everything back on any error."""
    with factory() as session, session.begin():
        yield session
