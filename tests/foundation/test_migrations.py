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


def test_head_schema_has_the_comparison_version_triggers(db_url: str) -> None:
    """Cached comparisons rely on them (migration 0015); SQLite drops a table's triggers when a batch
    migration rebuilds the table, so a later migration that forgets to make them again fails here."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                found = conn.execute(
                    text(
                        "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                        "WHERE t.tgname LIKE 'comparison_version%'"
                    )
                ).all()
            else:
                found = conn.execute(
                    text("SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'")
                ).all()
    finally:
        engine.dispose()
    tables = {table for table, _name in found}
    assert tables == {
        "runs",
        "run_metrics",
        "releases",
        "variants",
        "workloads",
        "clusters",
        "image_manifests",
    }
    assert len(found) == (7 if engine.dialect.name == "postgresql" else 16)


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


def _seed_release_with_runs(conn: object, run_ids: list[int]) -> None:
    execute = conn.execute  # type: ignore[attr-defined]
    execute(
        text(
            "INSERT INTO releases (id, image, tag, platform, manifest, driver_requirements, notes, "
            "created_at) VALUES (1, 'img', '1', 'gpu', '{}', '{}', '{}', CURRENT_TIMESTAMP)"
        )
    )
    for table, columns, values in CATALOG_ROWS:
        execute(
            text(
                f"INSERT INTO {table} (id, name, {columns}, created_at) "
                f"VALUES (1, 'x', {values}, CURRENT_TIMESTAMP)"
            )
        )
    for run_id in run_ids:
        execute(
            text(
                "INSERT INTO runs (id, release_id, cluster_id, workload_id, variant_id, repeat, status, "
                "attempt, source, queue_order, created_at, updated_at, provenance, environment) VALUES "
                f"({run_id}, 1, 1, 1, 1, {run_id}, 'succeeded', 1, 'scheduled', 0, CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP, '{}', '{}')"
            )
        )
        execute(
            text(
                "INSERT INTO run_metrics (run_id, name, value, unit, better) "
                f"VALUES ({run_id}, 'throughput', 1.0, 'tokens/s', 'higher')"
            )
        )


def _next_run_id(conn: object) -> int:
    execute = conn.execute  # type: ignore[attr-defined]
    execute(
        text(
            "INSERT INTO runs (release_id, cluster_id, workload_id, variant_id, repeat, status, attempt, "
            "source, queue_order, created_at, updated_at, provenance, environment) VALUES (1, 1, 1, 1, 99, "
            "'queued', 1, 'scheduled', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, '{}', '{}')"
        )
    )
    return int(execute(text("SELECT max(id) FROM runs")).scalar_one())


def test_deleted_ids_are_never_given_to_new_rows(db_url: str) -> None:
    """SQLite reused the ids of deleted runs (audit entries then named another run); PostgreSQL never did."""
    engine = make_engine(db_url)
    with engine.begin() as conn:
        _seed_release_with_runs(conn, [1, 2, 3])
        conn.execute(text("DELETE FROM run_metrics WHERE run_id IN (2, 3)"))
        conn.execute(text("DELETE FROM runs WHERE id IN (2, 3)"))
        if engine.dialect.name == "postgresql":  # explicit ids above did not move the sequence
            conn.execute(text("SELECT setval('runs_id_seq', 3)"))
        assert _next_run_id(conn) == 4
    engine.dispose()


def test_0013_keeps_every_row_and_stops_reusing_ids(empty_db_url: str) -> None:
    """The rebuild of every table on SQLite keeps rows and their children (foreign keys are off while
    tables are rebuilt: a cascade would have emptied run_metrics), and from then on ids only grow."""
    engine = make_engine(empty_db_url)
    migrate.upgrade(engine, "0008")
    with engine.begin() as conn:
        _seed_release_with_runs(conn, [1, 2, 3, 4])
    migrate.upgrade(engine)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM run_metrics")).scalar_one() == 4
        conn.execute(text("DELETE FROM run_metrics WHERE run_id = 4"))
        conn.execute(text("DELETE FROM runs WHERE id = 4"))
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT setval('runs_id_seq', 4)"))
        assert _next_run_id(conn) == 5
    assert _drift(empty_db_url) == []
    migrate.downgrade(engine, "0008")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == 4
    engine.dispose()
