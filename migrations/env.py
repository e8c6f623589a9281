"""Alembic environment: the engine comes from ``ablate.backend.db.migrate`` (or ABLATE_DATABASE_URL)."""

from __future__ import annotations

from alembic import context

from ablate.backend.db import models  # noqa: F401  (registers every table on the metadata)
from ablate.backend.db.base import Base

config = context.config
target_metadata = Base.metadata


def _engine():  # type: ignore[no-untyped-def]
    engine = config.attributes.get("engine")
    if engine is None:
        from ablate.backend.config import get_settings
        from ablate.backend.db.session import make_engine

        engine = make_engine(get_settings().resolved_database_url)
    return engine


def run_migrations_offline() -> None:
    context.configure(
        url=str(_engine().url), target_metadata=target_metadata, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # A table rebuild (batch mode) drops the old copy; with foreign keys on, that delete would
            # cascade into child rows. The pragma only takes effect outside a transaction.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        # batch mode: SQLite cannot ALTER most things, so alembic rebuilds tables there
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()
            if broken:
                raise RuntimeError(f"migration left rows whose parent is gone: {broken[:5]}")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
