"""record_run_result: the dispatcher's path into the same ingest as POST /results."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Text, cast, select

from ablate.backend.db import series_codec
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, RunMetric, RunSeries, RunSeriesLevel
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import ingest, runs, studies
from ablate.backend.services.errors import ValidationProblem
from tests.services.conftest import Catalog


def _first_run(database: Database, c: Catalog) -> int:
    with database.transaction() as s:
        study = studies.create_study(
            s,
            StudyPlan(
                release=c.release,
                cluster=c.cluster,
                variants=c.variants[:1],
                workloads=c.workloads[:1],
                repeats=1,
            ),
        )
        return s.scalars(select(Run.id).where(Run.study_id == study.id)).one()


def _record(database: Database, run_id: int, **overrides: Any) -> None:
    values: dict[str, Any] = {
        "status": "succeeded",
        "metrics": {"throughput_tokens_per_s": (1000.0, "tokens/s"), "peak_memory_gib": (3.5, "GiB")},
        "series": {"step_time_s": ([1, 2, 3, 4], [0.5, 0.4, 0.45, 0.41])},
        "provenance": {"host": "n1"},
        "environment": {"NCCL_SOCKET_IFNAME": "eth0"},
        "error": None,
        "failure_kind": None,
        "log_tail": "done",
        "log_path": "/logs/1.log",
        "started_at": None,
        "finished_at": None,
    }
    values.update(overrides)
    times = {k: values.pop(k) for k in ("started_at", "finished_at")}
    with database.transaction() as s:
        ingest.record_run_result(s, s.get(Run, run_id), RunResult(**values), **times)


def test_record_writes_metrics_series_and_fields(database: Database, seeded: Catalog) -> None:
    run_id = _first_run(database, seeded)
    _record(database, run_id)
    _record(database, run_id, metrics={"throughput_tokens_per_s": (1100.0, "tokens/s")})  # a retry replaces
    with database.read() as s:
        run = s.get(Run, run_id)
        assert run.status == "succeeded" and run.latest_throughput == 1100.0
        assert run.environment == {"NCCL_SOCKET_IFNAME": "eth0"} and run.log_path == "/logs/1.log"
        assert [(m.name, m.value, m.unit) for m in s.scalars(select(RunMetric))] == [
            ("throughput_tokens_per_s", 1100.0, "tokens/s")
        ]
        row = s.scalars(select(RunSeries)).one()
        steps, values = series_codec.unpack(row.steps, row.values)
        assert steps.tolist() == [1, 2, 3, 4] and np.allclose(values, [0.5, 0.4, 0.45, 0.41])
        assert (row.n_points, row.min_value, row.max_value, row.last_value) == (4, 0.4, 0.5, 0.41)
        assert run.study.status == "succeeded"


@pytest.mark.parametrize(
    ("metrics", "series", "loc"),
    [
        ({"throughput_tokens_per_s": (math.nan, "tokens/s")}, {}, "metrics.throughput_tokens_per_s"),
        ({"throughput_tokens_per_s": (-1.0, "tokens/s")}, {}, "metrics.throughput_tokens_per_s"),
        ({"peak_memory_gib": (3.0, "MiB")}, {}, "metrics.peak_memory_gib"),
        ({"my_metric": (3.0, None)}, {}, "metrics.my_metric"),
        ({"mfu": (1.5, "ratio")}, {}, "metrics.mfu"),
        ({}, {"loss": ([1, 2], [1.0, math.inf])}, "series.loss"),
        ({}, {"loss": ([2, 1], [1.0, 2.0])}, "series.loss"),
        ({}, {"loss": ([1, 2, 3], [1.0, 2.0])}, "series.loss"),
        ({}, {"step_time_s": ([1, 2], [1.0, -2.0])}, "series.step_time_s"),
    ],
)
def test_bad_data_is_refused_and_nothing_written(
    database: Database, seeded: Catalog, metrics: dict, series: dict, loc: str
) -> None:
    run_id = _first_run(database, seeded)
    with pytest.raises(ValidationProblem) as err:
        _record(database, run_id, metrics=metrics, series=series)
    assert [e.loc for e in err.value.errors] == [loc]
    with database.read() as s:
        assert s.get(Run, run_id).status == "queued"
        assert s.scalars(select(RunMetric)).all() == [] and s.scalars(select(RunSeries)).all() == []


def test_custom_metric_with_unit_and_cancelled_run_stays_cancelled(
    database: Database, seeded: Catalog
) -> None:
    run_id = _first_run(database, seeded)
    with database.transaction() as s:
        s.get(Run, run_id).status = "cancelled"
    metrics = {"grad_norm": (-0.5, "1")}
    _record(
        database, run_id, status="failed", metrics=metrics, better={"grad_norm": "lower"}, error="stopped"
    )
    with database.read() as s:
        run = s.get(Run, run_id)
        assert run.status == "cancelled" and run.error == "stopped"
        assert s.execute(select(RunMetric.unit, RunMetric.better)).all() == [("1", "lower")]


@pytest.mark.parametrize(
    ("metric", "unit", "better", "stored"),
    [
        ("dataloader_wait", "ms/step", None, "lower"),
        ("energy", "J", None, "lower"),
        ("hbm_per_device", "GiB/device", None, "lower"),
        ("decode_rate", "tokens/s/device", None, "higher"),
        ("utilisation", "%", "higher", "higher"),
        ("throughput_tokens_per_s", "tokens/s", None, None),  # registered: the registry decides
    ],
)
def test_direction_is_fixed_at_ingest(
    database: Database, seeded: Catalog, metric: str, unit: str, better: str | None, stored: str | None
) -> None:
    run_id = _first_run(database, seeded)
    _record(database, run_id, metrics={metric: (2.0, unit)}, better={metric: better} if better else {})
    with database.read() as s:
        assert s.execute(select(RunMetric.name, RunMetric.better)).all() == [(metric, stored)]


@pytest.mark.parametrize(
    ("metric", "unit", "better", "message"),
    [
        ("utilisation", "%", None, "state it with better: 'higher' or better: 'lower'"),
        ("throughput_tokens_per_sec", "tokens/s", None, "did you mean 'throughput_tokens_per_s'?"),
        ("step_time_s", "s", "higher", "lower-is-better"),
        ("my_rate", "tokens/s", "sideways", "better must be 'higher' or 'lower'"),
    ],
)
def test_undecidable_or_contradictory_direction_is_refused(
    database: Database, seeded: Catalog, metric: str, unit: str, better: str | None, message: str
) -> None:
    run_id = _first_run(database, seeded)
    with pytest.raises(ValidationProblem) as err:
        _record(database, run_id, metrics={metric: (2.0, unit)}, better={metric: better} if better else {})
    assert err.value.errors[0].loc == f"metrics.{metric}" and message in err.value.errors[0].msg
    with database.read() as s:
        assert s.scalars(select(RunMetric)).all() == []


def _study_runs(database: Database, c: Catalog, n_variants: int) -> tuple[int, list[int]]:
    with database.transaction() as s:
        study = studies.create_study(
            s,
            StudyPlan(
                release=c.release,
                cluster=c.cluster,
                variants=c.variants[:n_variants],
                workloads=c.workloads[:1],
                repeats=1,
            ),
        )
        return study.id, list(s.scalars(select(Run.id).where(Run.study_id == study.id).order_by(Run.id)))


def _item(run: Run, **overrides: Any) -> ingest.FinishedRun:
    values: dict[str, Any] = {
        "status": "succeeded",
        "metrics": {"throughput_tokens_per_s": (float(run.id), "tokens/s")},
        "series": {"step_time_s": ([1, 2], [0.5, 0.4])},
        "provenance": {},
        "environment": {},
        "error": None,
        "failure_kind": None,
        "log_tail": "",
        "log_path": None,
    }
    values.update(overrides)
    return ingest.FinishedRun(run, RunResult(**values))


def test_batch_records_every_run_and_refreshes_the_study_once(database: Database, seeded: Catalog) -> None:
    study_id, ids = _study_runs(database, seeded, 2)
    with database.transaction() as s:
        runs = [s.get(Run, i) for i in ids]
        assert ingest.record_run_results(s, [_item(r) for r in runs]) == {study_id}
    with database.read() as s:
        assert {r.status for r in s.scalars(select(Run).where(Run.id.in_(ids)))} == {"succeeded"}
        assert sorted(s.execute(select(RunMetric.run_id, RunMetric.value))) == [(i, float(i)) for i in ids]
        assert len(s.scalars(select(RunSeries)).all()) == 2
        assert studies.get_study(s, study_id).status == "succeeded"


def test_batch_with_one_bad_result_writes_nothing(database: Database, seeded: Catalog) -> None:
    _, ids = _study_runs(database, seeded, 2)
    with pytest.raises(ingest.InvalidResults) as err, database.transaction() as s:
        runs = [s.get(Run, i) for i in ids]
        bad = _item(runs[1], metrics={"throughput_tokens_per_s": (math.nan, "tokens/s")})
        ingest.record_run_results(s, [_item(runs[0]), bad])
    assert list(err.value.by_index) == [1]
    assert [e.loc for e in err.value.by_index[1].errors] == ["metrics.throughput_tokens_per_s"]
    assert [e.loc for e in err.value.errors] == ["[1].metrics.throughput_tokens_per_s"]
    with database.read() as s:
        assert {r.status for r in s.scalars(select(Run).where(Run.id.in_(ids)))} == {"queued"}
        assert s.scalars(select(RunMetric)).all() == [] and s.scalars(select(RunSeries)).all() == []


def test_batch_over_two_studies_and_refresh_left_to_the_caller(database: Database, seeded: Catalog) -> None:
    first, ids_a = _study_runs(database, seeded, 1)
    second, ids_b = _study_runs(database, seeded, 2)
    with database.transaction() as s:
        items = [_item(s.get(Run, i)) for i in (ids_a[0], ids_b[0])]
        assert ingest.record_run_results(s, items, refresh_studies=False) == {first, second}
        assert studies.get_study(s, first).status == "queued"  # not refreshed yet
        assert studies.refresh_study_statuses(s, [first, second, 10**6]) == {
            first: "succeeded",
            second: "running",
        }
    with database.read() as s:
        assert studies.get_study(s, first).finished_at is not None
        assert studies.get_study(s, second).finished_at is None


def test_long_series_get_downsampled_levels_that_reads_use(database: Database, seeded: Catalog) -> None:
    run_id = _first_run(database, seeded)
    n = 40_000
    steps = list(range(1, n + 1))
    rng = np.random.default_rng(5)
    values = (5.0 + rng.normal(0, 0.1, n)).tolist()
    values[12_345], values[30_001] = 9.5, 0.25  # a spike and a dip that any chart must show
    _record(database, run_id, series={"step_time_s": (steps, values)})
    _record(database, run_id, series={"step_time_s": (steps, values)})  # a retry replaces the levels
    with database.read() as s:
        levels = s.execute(
            select(RunSeriesLevel.max_points, RunSeriesLevel.n_points).where(RunSeriesLevel.run_id == run_id)
        ).all()
        assert all(points <= size for size, points in levels)
        assert sorted(m for m, _ in levels) == [1_024, 8_192]  # 40k points: levels up to 40k / 4
        small = runs.run_series(s, run_id, "step_time_s", max_points=500)
        full = runs.run_series(s, run_id, "step_time_s")
    assert small["downsampled"] and len(small["values"]) <= 500 and small["n_points"] == n
    assert max(small["values"]) == 9.5 and min(small["values"]) == 0.25
    assert small["steps"][0] == 1 and small["steps"][-1] == n
    assert full["values"] == values and full["steps"] == steps and not full["downsampled"]


def test_held_runs_are_written_as_loaded_runs_are(database: Database, seeded: Catalog) -> None:
    """The dispatcher's path (runs as their holder read them, one executemany UPDATE a set of
    columns) stores what the ORM's path stores for the same results: every column, the JSON columns'
    text included, with mixed sets of columns in one batch."""
    ids = _study_runs(database, seeded, 2)[1] + _study_runs(database, seeded, 2)[1]
    awkward = 'quote " backslash \\ tab \t line\nbreak é 漢 \U0001f600 \x01 end'
    tz = timezone(timedelta(hours=-7))
    kinds: list[dict[str, Any]] = [
        {"provenance": {"host": "n1", "b": [1, 2.5, None, True], "a": {"nested": awkward}}},
        {
            "status": "failed",
            "error": awkward,
            "failure_kind": "benchmark",
            "log_tail": awkward,
            "log_path": "/logs/é.log",
            "environment": {"Z": "1", "A": awkward},
        },
    ]
    started = datetime(2026, 12, 7, 10, 0, 0, 123456, tzinfo=tz)
    finished = datetime(2026, 12, 7, 18, 30, 5, tzinfo=UTC)
    with database.transaction() as s:
        loaded = [s.get(Run, i) for i in ids[:2]]
        ingest.record_run_results(
            s,
            [
                replace(_item(r, **k), started_at=started, finished_at=finished)
                for r, k in zip(loaded, kinds, strict=True)
            ],
        )
    with database.transaction() as s:
        held = [
            ingest.HeldRun(r.id, r.status, r.study_id, r.release_id, r.total_steps)
            for r in (s.get(Run, i) for i in ids[2:])
        ]
        held[0].extra.update(current_step=7, total_steps=9, lease_expires_at=None)  # another set of columns
        items = [
            replace(_item(s.get(Run, h.id), **k), run=h, started_at=started, finished_at=finished)
            for h, k in zip(held, kinds, strict=True)
        ]
        items[0].result.metrics = {"throughput_tokens_per_s": (float(ids[0]), "tokens/s")}
        items[1].result.metrics = {"throughput_tokens_per_s": (float(ids[1]), "tokens/s")}
        ingest.record_run_results(s, items)
    recorded = ["status", "error", "failure_kind", "provenance", "environment", "log_tail", "log_path"]
    columns = [Run.__table__.c[k] for k in [*recorded, "started_at", "finished_at", "latest_throughput"]]
    as_text = [cast(c, Text).label(f"{c.key}_text") for c in (Run.provenance, Run.environment)]
    with database.read() as s:
        rows = {r[0]: r[1:] for r in s.execute(select(Run.id, *columns, *as_text).where(Run.id.in_(ids)))}
        steps = dict(s.execute(select(Run.id, Run.current_step).where(Run.id.in_(ids))).all())
        stamps = dict(s.execute(select(Run.id, Run.updated_at).where(Run.id.in_(ids))).all())
    assert rows[ids[2]] == rows[ids[0]] and rows[ids[3]] == rows[ids[1]]
    got = dict(zip([c.key for c in columns], rows[ids[3]], strict=False))
    assert got["error"] == awkward.replace("\x01", "\ufffd") and got["environment"]["A"] == awkward
    assert got["started_at"] == started and got["finished_at"] == finished
    assert steps[ids[2]] == 7 and steps[ids[3]] is None
    assert stamps[ids[2]] >= stamps[ids[0]]  # updated_at is set on both paths
