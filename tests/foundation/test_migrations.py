"""The models and the migrations describe the same schema, and migrations run both ways on both databases."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

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


CATALOG_ROWS = (
    ("clusters", "accelerator, nodes, devices_per_node, labels", "'gpu', 1, 1, '{}'"),
    (
        "workloads",
        "data_parallel, tensor_parallel, pipeline_parallel, warmup_steps, runner_options",
        "1, 1, 1, 0, '{}'",
    ),
    ("variants", "position, factors, env, runner_options", "0, '[]', '{}', '{}'"),
)


def test_0008_renumbers_duplicate_ci_repeats_and_keeps_every_run(empty_db_url: str) -> None:
    """A CI job that always sent repeat 0 left copies: each later copy gets the cell's next free repeat
    (the old number kept in provenance); no run is dropped, and the unique index then holds."""
    engine = make_engine(empty_db_url)
    migrate.upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO releases (id, image, tag, platform, manifest, driver_requirements, notes, "
                "created_at) VALUES (1, 'img', '1', 'gpu', '{}', '{}', '{}', CURRENT_TIMESTAMP)"
            )
        )
        for table, columns, values in CATALOG_ROWS:
            conn.execute(
                text(
                    f"INSERT INTO {table} (id, name, {columns}, created_at) "
                    f"VALUES (1, 'x', {values}, CURRENT_TIMESTAMP)"
                )
            )
        for run_id, repeat, source in [
            (1, 0, "ci"),
            (2, 0, "ci"),
            (3, 1, "ci"),
            (4, 0, "ci"),
            (5, 0, "scheduled"),
        ]:
            conn.execute(
                text(
                    "INSERT INTO runs (id, release_id, cluster_id, workload_id, variant_id, repeat, status, "
                    "attempt, source, queue_order, created_at, updated_at, provenance, environment) VALUES "
                    f"({run_id}, 1, 1, 1, 1, {repeat}, 'succeeded', 1, '{source}', 0, CURRENT_TIMESTAMP, "
                    "CURRENT_TIMESTAMP, '{\"host\": \"h\"}', '{}')"
                )
            )
    migrate.upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, repeat, provenance FROM runs ORDER BY id")).all()
    engine.dispose()
    got = {r[0]: (r[1], json.loads(r[2]) if isinstance(r[2], str) else r[2]) for r in rows}
    assert got == {
        1: (0, {"host": "h"}),
        2: (2, {"host": "h", "renumbered_from_repeat": "0"}),
        3: (1, {"host": "h"}),
        4: (3, {"host": "h", "renumbered_from_repeat": "0"}),
        5: (0, {"host": "h"}),
    }
