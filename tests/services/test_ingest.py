"""record_run_result: the dispatcher's path into the same ingest as POST /results."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from backend.db import series_codec
from backend.db.database import Database
from backend.db.models import Run, RunMetric, RunSeries
from backend.schemas.studies import StudyPlan
from backend.services import ingest, studies
from backend.services.errors import ValidationProblem
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
    with database.transaction() as s:
        ingest.record_run_result(s, s.get(Run, run_id), **values)


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
    _record(database, run_id, status="failed", metrics={"grad_norm": (-0.5, "1")}, error="stopped")
    with database.read() as s:
        run = s.get(Run, run_id)
        assert run.status == "cancelled" and run.error == "stopped"
        assert s.scalars(select(RunMetric.unit)).all() == ["1"]
