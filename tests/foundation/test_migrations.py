"""The models and the migrations describe the same schema, and migrations run both ways on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from ablate.backend.db import migrate, models  # noqa: F401
from ablate.backend.db.base import Base
from ablate.backend.db.session import make_engine

TABLES = {
    "releases",
    "variants",
    "workloads",
    "clusters",
    "studies",
    "runs",
    "audit_events",
    "run_metrics",
    "run_series",
    "api_tokens",
}


def _drift(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_on_empty_database_creates_every_table(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= TABLES
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def test_models_and_migrations_do_not_drift(db_url: str) -> None:
    assert _drift(db_url) == []


def test_round_trip_upgrade_downgrade_base_upgrade(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()
    assert _drift(empty_db_url) == []
